#!/bin/sh
AW_ACK=9 exec /tmp/bins/agentwire-ack "$@"
