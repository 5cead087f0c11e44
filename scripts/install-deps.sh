#!/usr/bin/env bash
# Install the system packages tfos builds and tests with (Debian/Ubuntu), when
# they are missing. Needs root (or sudo) only if something must be installed.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
# tfos yarn's Java client and ApplicationMaster are built with a JDK and Maven
command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need+=(maven)
python3 -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
command -v pkg-config >/dev/null || need+=(pkg-config)
# jansson: JSON lines input and `tfos status` read JSON with it
test -f /usr/include/jansson.h || dpkg -s libjansson-dev >/dev/null 2>&1 || need+=(libjansson-dev)
# libcurl's header: tfos loads libcurl at run time for MLflow (src/platform/httpc.c)
test -f /usr/include/curl/curl.h || dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || need+=(libcurl4-openssl-dev)
# tests/slurm's cluster (make test-slurm passes --test; make demo does not need them): Debian's Slurm and munge
[ "${1:-}" != --test ] || command -v slurmctld >/dev/null || need+=(slurm-wlm)
[ "${1:-}" != --test ] || command -v munged >/dev/null || need+=(munge)
# tests/yarn's Kerberized cluster: kinit, as a user logged in with it (MIT Kerberos' clients)
[ "${1:-}" != --test ] || command -v kinit >/dev/null || need+=(krb5-user)
# and curl --negotiate, as an operator reaches its Kerberized REST API
[ "${1:-}" != --test ] || command -v curl >/dev/null || need+=(curl)
# and faketime, for a client whose clock is off from the KDC's
[ "${1:-}" != --test ] || command -v faketime >/dev/null || need+=(faketime)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
