#!/bin/sh
AW_ACK=3 exec /tmp/bins/agentwire-ack "$@"
