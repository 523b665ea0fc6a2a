#!/usr/bin/env bash
# The real node's torch base image (site-image.sh with the torch the project pins).
# Usage: torch-image.sh PYTHON [--print-dir]
exec "$(dirname "$0")/site-image.sh" "$1" torch "${@:2}"
