#!/bin/sh
# Coverage is not collected in this project's offline builds.
echo "coverage is not supported in the offline build" >&2
exit 1
