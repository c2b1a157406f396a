#!/bin/sh
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 exec /tmp/bins/agentwire-base "$@"
