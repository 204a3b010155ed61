#!/bin/sh
# Adds the clusterset-dns stub-zone block (clusterset.Corefile, next to this
# script) to the cluster's CoreDNS Corefile, forwarding to the ClusterIP of
# Service clusterset-dns/clusterset-dns.
#
#   deploy/coredns/patch-corefile.sh [--context CTX] [--zone ZONE]
#       prints the new Corefile (changes nothing);
#   deploy/coredns/patch-corefile.sh --apply [--context CTX] [--zone ZONE]
#       writes it into ConfigMap kube-system/coredns, keeping a copy of the
#       old one, and only if nobody changed the ConfigMap meanwhile.
#
# Idempotent: when the Corefile already has a server block for the zone,
# nothing changes (it prints the Corefile as it is, or applies nothing).
# Needs only kubectl and POSIX tools. $KUBECTL overrides the kubectl used.
set -eu

kubectl=${KUBECTL:-kubectl}
here=$(dirname "$0")
apply=false
zone=clusterset.local
context=

usage() {
    sed -n '2,13s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
        --apply) apply=true ;;
        --context) [ $# -ge 2 ] || usage; context=$2; shift ;;
        --zone) [ $# -ge 2 ] || usage; zone=$2; shift ;;
        -h | --help) usage ;;
        *) echo "patch-corefile.sh: unknown argument $1" >&2; usage ;;
    esac
    shift
done

case $zone in
    *[!a-z0-9.-]* | '' | .* | *.) echo "patch-corefile.sh: bad zone '$zone'" >&2; exit 2 ;;
esac

k() {
    if [ -n "$context" ]; then
        "$kubectl" --context "$context" "$@"
    else
        "$kubectl" "$@"
    fi
}

tmp=${TMPDIR:-/tmp}/patch-corefile.$$
mkdir -m 700 "$tmp"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

ip=$(k -n clusterset-dns get service clusterset-dns -o 'jsonpath={.spec.clusterIP}')
case $ip in
    '' | None | *[!0-9a-fA-F.:]*)
        echo "patch-corefile.sh: Service clusterset-dns/clusterset-dns has no ClusterIP ('$ip'); apply deploy/overlays/dns first" >&2
        exit 1 ;;
esac

# The resourceVersion on the first line, then the Corefile.
k -n kube-system get configmap coredns \
    -o 'jsonpath={.metadata.resourceVersion}{"\n"}{.data.Corefile}' >"$tmp/current"
rv=$(sed -n 1p "$tmp/current")
case $rv in
    '' | *[!0-9A-Za-z]*) echo "patch-corefile.sh: unexpected resourceVersion '$rv'" >&2; exit 1 ;;
esac
sed 1d "$tmp/current" >"$tmp/Corefile"
if [ ! -s "$tmp/Corefile" ]; then
    echo "patch-corefile.sh: ConfigMap kube-system/coredns has no Corefile" >&2
    exit 1
fi

zone_re=$(printf '%s' "$zone" | sed 's/\./\\./g')
if grep -Eq "^[[:space:]]*(dns://)?$zone_re\\.?(:[0-9]+)?([[:space:]]|\\{|\$)" "$tmp/Corefile"; then
    echo "patch-corefile.sh: the Corefile already has a $zone block; nothing to do" >&2
    if ! grep -Fq "$ip" "$tmp/Corefile"; then
        echo "patch-corefile.sh: warning: it does not mention $ip, the ClusterIP of clusterset-dns; check its forward line" >&2
    fi
    if ! $apply; then
        cat "$tmp/Corefile"
    fi
    exit 0
fi

# The block of clusterset.Corefile (its comments stay there), for this
# zone and address, after the Corefile's own blocks.
{
    cat "$tmp/Corefile"
    echo
    echo "# clusterset-dns stub zone (deploy/coredns/clusterset.Corefile)"
    sed -n -e "s/^clusterset\\.local:53 {/$zone:53 {/" -e "s/CLUSTERSET_DNS_SERVICE_IP/$ip/" \
        -e '/:53 {$/,$p' "$here/clusterset.Corefile"
} >"$tmp/new"

if ! $apply; then
    cat "$tmp/new"
    exit 0
fi

# kubectl itself JSON-encodes the new Corefile (the one "Corefile" line of
# a client-side ConfigMap); the patch carries the resourceVersion read above,
# so it fails rather than overwrite a concurrent change. (Encoding needs no
# cluster, hence no --context.)
value=$("$kubectl" create configmap corefile --from-file=Corefile="$tmp/new" --dry-run=client -o json |
    sed -n 's/^[[:space:]]*"Corefile": \(".*"\)$/\1/p')
case $value in
    \"*\") ;;
    *) echo "patch-corefile.sh: could not encode the Corefile" >&2; exit 1 ;;
esac
backup=${TMPDIR:-/tmp}/coredns-Corefile.$rv.$$
(umask 077 && set -C && cat "$tmp/Corefile" >"$backup")
printf '{"metadata":{"resourceVersion":"%s"},"data":{"Corefile":%s}}' "$rv" "$value" >"$tmp/patch.json"
k -n kube-system patch configmap coredns --type merge --patch-file "$tmp/patch.json"
echo "patch-corefile.sh: added the $zone block (forward to $ip); the previous Corefile is in $backup" >&2
echo "patch-corefile.sh: CoreDNS's reload plugin picks it up within about two minutes; without it:" >&2
echo "  kubectl -n kube-system rollout restart deployment coredns" >&2
