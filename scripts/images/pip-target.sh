# Sourced by build.sh and lock.sh: the wheels an image's /opt/venv takes, as
# pip download's target options: CPython 3.11 (Debian 12's python3), x86_64,
# manylinux up to glibc 2.36 (Debian 12's). Each manylinux tag is named: pip
# before 24 does not widen --platform manylinux_2_36 to the older ones.
# shellcheck shell=bash disable=SC2034  # PIP_TARGET is for the sourcing script
PIP_TARGET=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
            --platform linux_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64
            --platform manylinux2014_x86_64)
for minor in $(seq 5 36); do PIP_TARGET+=(--platform "manylinux_2_${minor}_x86_64"); done
unset minor
