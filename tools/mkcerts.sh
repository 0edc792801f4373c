#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Makes the certificates of a SEMQ deployment with the openssl CLI: one CA,
# and for each node id a key and a certificate with CN=ID and the URI SAN
# semq://ID, signed by that CA (SPEC §2, §10).
#
#   tools/mkcerts.sh [--ca-name NAME] [--expired] DIR ID [ID...]
#
# DIR/ca.crt + DIR/ca.key are created on the first run and reused after that,
# so nodes added later are signed by the same CA. For each ID it writes
# DIR/ID.key and DIR/ID.crt (an existing pair is replaced). Keys are EC P-256,
# certificates last 825 days and get a random serial.
#
#   --ca-name NAME  use (or create) a second CA DIR/NAME-ca.crt + .key instead,
#                   e.g. for tests of a peer from the wrong CA
#   --expired       make certificates that expired yesterday (for tests)
#
# Nothing made here belongs in git; .gitignore ignores *.crt and *.key.
set -euo pipefail

usage() {
	echo "usage: $0 [--ca-name NAME] [--expired] DIR ID [ID...]" >&2
	echo "  makes DIR/ca.crt (once) and DIR/ID.key + DIR/ID.crt per id" >&2
	exit 2
}

die() {
	echo "mkcerts: $*" >&2
	exit 1
}

ca_name=""
expired=0
while [ $# -gt 0 ]; do
	case "$1" in
	--ca-name)
		[ $# -ge 2 ] || usage
		ca_name="$2"
		shift 2
		;;
	--expired)
		expired=1
		shift
		;;
	-h | --help) usage ;;
	--)
		shift
		break
		;;
	-*)
		echo "mkcerts: unknown option '$1'" >&2
		usage
		;;
	*) break ;;
	esac
done
[ $# -ge 2 ] || usage
dir="$1"
shift

# Ids become file names and certificate names: the node id alphabet only.
valid_id() {
	[[ "$1" =~ ^[A-Za-z0-9._-]{1,64}$ ]]
}
if [ -n "$ca_name" ] && ! valid_id "$ca_name"; then
	echo "mkcerts: --ca-name '$ca_name': use 1-64 of A-Za-z0-9._-" >&2
	usage
fi
if [ -n "$ca_name" ]; then
	ca_base="$ca_name-ca"
	ca_cn="SEMQ $ca_name CA"
else
	ca_base="ca"
	ca_cn="SEMQ CA"
fi
ca_crt="$dir/$ca_base.crt"
ca_key="$dir/$ca_base.key"
for id in "$@"; do
	if ! valid_id "$id" || [ "$id" = "." ] || [ "$id" = ".." ]; then
		echo "mkcerts: '$id' is not a node id (1-64 of A-Za-z0-9._-)" >&2
		usage
	fi
	if [ "$id" = "ca" ] || [ "$id" = "$ca_base" ]; then
		echo "mkcerts: '$id': its files would overwrite the CA's" >&2
		usage
	fi
done

command -v openssl >/dev/null || die "openssl not found in PATH"
mkdir -p "$dir"
umask 077 # keys readable by their owner only

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mkcerts.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

newkey() {
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
		-out "$1" 2>"$tmp/err" || die "$1: $(cat "$tmp/err")"
}

# A positive serial of up to 128 random bits, as hex (openssl ca's format).
serial() {
	echo "01$(openssl rand -hex 15)"
}

if [ -f "$ca_crt" ] && [ -f "$ca_key" ]; then
	echo "mkcerts: reusing CA $ca_crt"
elif [ -e "$ca_crt" ] || [ -e "$ca_key" ]; then
	die "$ca_crt and $ca_key: one exists without the other; remove it"
else
	newkey "$ca_key"
	openssl req -x509 -new -key "$ca_key" -subj "/CN=$ca_cn" \
		-days 3650 -set_serial "0x$(serial)" -sha256 \
		-addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" \
		-addext "subjectKeyIdentifier=hash" \
		-out "$ca_crt" 2>"$tmp/err" || die "$ca_crt: $(cat "$tmp/err")"
	chmod 644 "$ca_crt"
	echo "mkcerts: made CA $ca_crt and $ca_key"
fi

# openssl ca rather than x509 -req: it takes explicit start and end dates,
# which the expired certificates need (OpenSSL 3.0's x509 has no -not_after).
# Its database and serial file live in $tmp: serials are random, not counted.
touch "$tmp/index.txt"
leaf_cnf() {
	cat <<EOF
[ca]
default_ca = semq
[semq]
database = $tmp/index.txt
serial = $tmp/serial
new_certs_dir = $tmp
default_md = sha256
policy = policy_any
unique_subject = no
copy_extensions = none
[policy_any]
commonName = supplied
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = URI:semq://$1
EOF
}

if [ "$expired" -eq 1 ]; then
	dates=(-startdate "$(date -u -d '30 days ago' +%Y%m%d%H%M%SZ)"
		-enddate "$(date -u -d '1 day ago' +%Y%m%d%H%M%SZ)")
else
	dates=(-days 825)
fi

for id in "$@"; do
	key="$dir/$id.key"
	crt="$dir/$id.crt"
	newkey "$key"
	openssl req -new -key "$key" -subj "/CN=$id" -out "$tmp/$id.csr" \
		2>"$tmp/err" || die "$id: $(cat "$tmp/err")"
	serial >"$tmp/serial"
	leaf_cnf "$id" >"$tmp/leaf.cnf"
	openssl ca -batch -notext -config "$tmp/leaf.cnf" -extensions leaf \
		-cert "$ca_crt" -keyfile "$ca_key" "${dates[@]}" \
		-in "$tmp/$id.csr" -out "$crt" 2>"$tmp/err" ||
		die "$crt: $(cat "$tmp/err")"
	chmod 644 "$crt"
	if [ "$expired" -eq 1 ]; then
		echo "mkcerts: made $crt (EXPIRED) and $key, signed by $ca_crt"
	else
		echo "mkcerts: made $crt and $key, signed by $ca_crt"
	fi
done
