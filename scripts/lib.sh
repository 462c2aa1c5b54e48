# Shared by the scripts: install what is missing with apt when we can, say what to do when not.

need_packages() {
    # Usage: need_packages CHECK_COMMAND PACKAGE... ; CHECK_COMMAND succeeds when present.
    local check=$1; shift
    if eval "$check" >/dev/null 2>&1; then return 0; fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing $* with apt-get" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
        eval "$check" >/dev/null 2>&1 && return 0
    fi
    echo "error: missing $*. On Debian, as root: apt-get install -y $*" >&2
    exit 1
}

need_postgres() {
    # Only needed when we start PostgreSQL ourselves.
    if [ -n "${DATABASE_URL:-}" ]; then return 0; fi
    need_packages 'ls /usr/lib/postgresql/*/bin/initdb' postgresql
}
