# Sourced by scripts/test: a CPython X.Y that the machine has no package for, from Debian's
# unstable suite (sid), in a root made with `debootstrap --variant=minbase` and entered with
# chroot. No registry serves a Python 3.14 for Debian 12, and CPython's sources are not
# reachable from every machine the tests run on; Debian's mirror is, since apt uses it.
#
#   debian_python_root X.Y      print the root's path, setting it up first if it is not there
#                               (debootstrap is installed with apt-get if missing); the root is
#                               cached outside the checkout, in $AIOWHEEL_CACHE (default
#                               ~/.cache/aiowheel), and shared by every checkout
#   in_debian_python_root DIR COMMAND...
#                               run COMMAND (with bash -c) in the root DIR, the checkout
#                               bind-mounted at /aiowheel and the working directory; /proc and
#                               /dev mounted. The mounts live in a private mount namespace
#                               (unshare), so they are gone when COMMAND ends however it ends,
#                               and are also unmounted by a trap.
#
# Both need root (debootstrap, mount, chroot): as root, or through `sudo -n`.
# debian_python_can_run tells whether that is so, and says why not on stderr.

debian_python_sudo=()
debian_python_can_run() {
    if [ "$(id -u)" -eq 0 ]; then
        debian_python_sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        debian_python_sudo=(sudo -n)
    else
        echo "a Python from Debian's sid suite needs root (debootstrap, mount, chroot): not root," \
            "and no password-less sudo" >&2
        return 1
    fi
    command -v unshare >/dev/null 2>&1 && command -v chroot >/dev/null 2>&1 || {
        echo "a Python from Debian's sid suite needs unshare and chroot (util-linux, coreutils)" >&2
        return 1
    }
}

# The Debian mirror apt on this machine uses (its first "debian" archive, not the security one),
# read from apt's sources in either format; Debian's own if apt names none.
debian_mirror() {
    local uri
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
            2>/dev/null |
        sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]*\)\?//p' |
        tr ' ' '\n' | grep -E '^https?://.*/debian/?$' | head -n 1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

debian_python_root() {
    local version=$1 cache dir t
    cache=${AIOWHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aiowheel}
    dir="$cache/debian-sid-python$version"
    if [ ! -f "$dir/.aiowheel-ready" ]; then
        t=$SECONDS
        if ! command -v debootstrap >/dev/null 2>&1; then
            echo "== installing debootstrap with apt-get" >&2
            "${debian_python_sudo[@]}" apt-get install -y -q debootstrap >&2 ||
                { "${debian_python_sudo[@]}" apt-get update -q >&2 &&
                    "${debian_python_sudo[@]}" apt-get install -y -q debootstrap >&2; } || return 1
            echo "   debootstrap installed in $((SECONDS - t)) s" >&2
        fi
        t=$SECONDS
        echo "== setting up Python $version from Debian's sid suite in $dir (once; cached)" >&2
        mkdir -p "$cache"  # the log below is written as the caller
        "${debian_python_sudo[@]}" rm -rf "$dir.partial"
        # minbase plus what the tests need: the interpreter, venv (ensurepip), the headers and a
        # compiler for the compiled core, and CA certificates for pip.
        "${debian_python_sudo[@]}" debootstrap --variant=minbase \
            --include="python$version,python$version-venv,python$version-dev,gcc,libc6-dev,ca-certificates" \
            sid "$dir.partial" "$(debian_mirror)" > "$cache/debootstrap-python$version.log" 2>&1 || {
            echo "error: debootstrap failed; its log: $cache/debootstrap-python$version.log" >&2
            tail -n 5 "$cache/debootstrap-python$version.log" >&2
            return 1
        }
        "${debian_python_sudo[@]}" mkdir -p "$dir.partial/aiowheel"
        "${debian_python_sudo[@]}" touch "$dir.partial/.aiowheel-ready"
        "${debian_python_sudo[@]}" mv "$dir.partial" "$dir"
        echo "   the root is ready in $((SECONDS - t)) s" \
            "($("${debian_python_sudo[@]}" chroot "$dir" "python$version" --version))" >&2
    fi
    echo "$dir"
}

in_debian_python_root() {
    local dir=$1 checkout
    shift
    checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    # A clean environment: the host's pip configuration (indexes, find-links, constraints) names
    # files the root does not have.
    "${debian_python_sudo[@]}" env AIOWHEEL_EXPECT_CORE="${AIOWHEEL_EXPECT_CORE:-}" CI="${CI:-}" \
        TERM="${TERM:-dumb}" unshare --mount --propagation private -- bash -c '
        set -eu
        dir=$1 checkout=$2 command=$3
        trap "umount -R \"\$dir/etc/ssl/certs\" \"\$dir/dev\" \"\$dir/proc\" \"\$dir/aiowheel\" \
            2>/dev/null || true" EXIT
        mount --bind "$checkout" "$dir/aiowheel"
        mount -t proc proc "$dir/proc"
        mount --rbind /dev "$dir/dev"
        # The host'"'"'s name servers and certificate authorities (a machine whose traffic goes
        # through a TLS proxy trusts the proxy'"'"'s authority there), read-only.
        cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
        if [ -d /etc/ssl/certs ]; then
            mount --bind /etc/ssl/certs "$dir/etc/ssl/certs"
            mount -o remount,bind,ro "$dir/etc/ssl/certs"
        fi
        chroot "$dir" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" \
            PATH=/usr/local/bin:/usr/bin:/bin AIOWHEEL_EXPECT_CORE="${AIOWHEEL_EXPECT_CORE:-}" \
            /bin/bash -c "cd /aiowheel && $command"
    ' _ "$dir" "$checkout" "$*"
}
