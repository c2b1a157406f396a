#!/bin/sh
AW_ACK=1 exec /tmp/bins/agentwire-ack "$@"
