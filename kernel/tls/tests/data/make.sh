#!/bin/sh
# Regenerates the test certificates (run from this folder; needs openssl 3). A test CA signs
# an ECDSA P-256 leaf and an Ed25519 leaf for bramble.test and *.bramble.test, valid for 100
# years; expired.pem is the P-256 key's certificate that ended in 2001.
set -eu
days=36500
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl ecparam -name prime256v1 -genkey -noout -out "$work/ca.key"
openssl req -x509 -new -key "$work/ca.key" -sha256 -days $days -subj "/CN=Bramble test CA" \
  -out ca.pem
openssl ecparam -name prime256v1 -genkey -noout -out p256.key        # SEC1 "EC PRIVATE KEY"
openssl pkcs8 -topk8 -nocrypt -in p256.key -out p256.pk8           # PKCS#8 "PRIVATE KEY"
openssl genpkey -algorithm ed25519 -out ed25519.key
openssl ecparam -name prime256v1 -genkey -noout -out other.key     # matches no certificate
cat > "$work/ca.cnf" <<CNF
[ca]
default_ca = test
[test]
unique_subject = no
database = $work/index.txt
new_certs_dir = $work
serial = $work/serial
default_md = sha256
policy = anything
copy_extensions = none
[anything]
commonName = supplied
[leaf]
basicConstraints = CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:bramble.test, DNS:*.bramble.test
CNF
: > "$work/index.txt"
echo 1000 > "$work/serial"
sign() { # key output [ca options...]
  key=$1; out=$2; shift 2
  openssl req -new -key "$key" -subj "/CN=bramble.test" -out "$work/leaf.csr"
  openssl ca -batch -config "$work/ca.cnf" -cert ca.pem -keyfile "$work/ca.key" \
    -extensions leaf -notext -in "$work/leaf.csr" -out "$out" "$@"
}
sign p256.key p256.pem -days $days
sign ed25519.key ed25519.pem -days $days
sign p256.key expired.pem -startdate 20000101000000Z -enddate 20010101000000Z
