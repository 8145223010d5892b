# Sourced, not run: obtains Slurm's original source tarball through Debian's source package
# (`apt-get source slurm-wlm`, adding a deb-src entry for the mirror the machine already uses)
# into a directory outside what git tracks. Nothing of Slurm's is committed to this repository:
# it is GPL. Used by run.sh (the test suite) and openapi-schema.sh (the REST schemas).
#
#   slurm_orig_tarball DIR VERSION   prints the path of slurm-wlm_VERSION.orig.tar.* in DIR,
#                                    downloading it first when DIR lacks it; refuses any other
#                                    version Debian offers. Needs root when it downloads.
# On failure it prints why on stderr and returns 1.

slurm_orig_tarball() {
    local dir=$1 want=$2 orig version uris suites
    orig=$(ls "$dir"/slurm-wlm_"$want".orig.tar.* 2>/dev/null | head -n1 || true)
    if [ -n "$orig" ]; then echo "$orig"; return 0; fi
    mkdir -p "$dir"
    if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
        # The same mirror and suites as the machine's binary packages (deb822, as Debian 12 ships).
        uris=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
        suites=$(awk '/^Suites:/ {$1=""; print; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
        if [ -z "$uris" ]; then
            echo "no Debian mirror found in /etc/apt/sources.list.d/debian.sources to add deb-src for" >&2
            return 1
        fi
        echo "adding deb-src for $uris ($suites)" >&2
        printf 'Types: deb-src\nURIs: %s\nSuites:%s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$uris" "$suites" >/etc/apt/sources.list.d/debian-src.sources
    fi
    apt-get update -q >/dev/null || { echo "apt-get update failed" >&2; return 1; }
    version=$(apt-cache showsrc slurm-wlm 2>/dev/null | awk '/^Version:/ {print $2}' | sort -V | tail -n1)
    if [ -z "$version" ]; then echo "apt-cache knows no source package slurm-wlm" >&2; return 1; fi
    case "$version" in
        "$want"-*) ;;
        *) echo "Debian offers slurm-wlm $version, not $want" >&2; return 1 ;;
    esac
    # The whole source is ~10 MB packed; callers unpack only the parts they read.
    (cd "$dir" && apt-get source -q --download-only "slurm-wlm=$version" >/dev/null 2>&1) \
        || { echo "apt-get source slurm-wlm=$version failed" >&2; return 1; }
    rm -f "$dir"/*.debian.tar.* "$dir"/*.dsc
    orig=$(ls "$dir"/slurm-wlm_"$want".orig.tar.* 2>/dev/null | head -n1 || true)
    if [ -z "$orig" ]; then echo "no orig tarball after apt-get source" >&2; return 1; fi
    echo "$orig"
}
