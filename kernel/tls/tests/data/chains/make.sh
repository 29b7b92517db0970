#!/bin/sh
# Regenerates the chain and signature fixtures of tests/verify.rs and the TLS probe (run from
# this folder; needs openssl 3). Two chains shaped like Let's Encrypt's, for bramble.test:
#   rsa-*:  an RSA-4096 root over an RSA-2048 intermediate over an RSA-2048 leaf, each signed
#           with sha256WithRSAEncryption (ISRG Root X1 / R-series / an RSA leaf);
#   ec-*:   a P-384 root over a P-384 intermediate over a P-256 leaf, each signed with
#           ecdsa-with-SHA384 (ISRG Root X2 / E-series / a P-256 leaf).
# Valid for 100 years. Then signatures by openssl over message.bin for each scheme the client
# verifies (sig-KEY-SCHEME.bin) and the DER public keys they check against (KEY.pub.der:
# RSAPublicKey for RSA, the SEC1 point for P-384), with an RSA-1024 and an RSA-4608 key that
# the verifier must refuse for their size.
set -eu
days=36500
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/ext.cnf" <<CNF
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:bramble.test
authorityKeyIdentifier = keyid
CNF
chain() { # prefix root-key-options int-key-options leaf-key-options digest
  p=$1; md=$5
  openssl genpkey $2 -out "$work/$p-root.key" 2>/dev/null
  openssl req -x509 -new -key "$work/$p-root.key" -$md -days $days \
    -subj "/CN=Bramble test root $p" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$p-root.pem"
  openssl genpkey $3 -out "$work/$p-int.key" 2>/dev/null
  openssl req -new -key "$work/$p-int.key" -subj "/CN=Bramble test intermediate $p" \
    -out "$work/int.csr"
  openssl x509 -req -in "$work/int.csr" -CA "$p-root.pem" -CAkey "$work/$p-root.key" -$md \
    -days $days -set_serial 2 -extfile "$work/ext.cnf" -extensions ca -out "$p-int.pem" 2>/dev/null
  openssl genpkey $4 -out "$p-leaf.key" 2>/dev/null
  openssl req -new -key "$p-leaf.key" -subj "/CN=bramble.test" -out "$work/leaf.csr"
  openssl x509 -req -in "$work/leaf.csr" -CA "$p-int.pem" -CAkey "$work/$p-int.key" -$md \
    -days $days -set_serial 3 -extfile "$work/ext.cnf" -extensions leaf -out "$p-leaf.pem" 2>/dev/null
}
chain rsa "-algorithm RSA -pkeyopt rsa_keygen_bits:4096" "-algorithm RSA -pkeyopt rsa_keygen_bits:2048" \
  "-algorithm RSA -pkeyopt rsa_keygen_bits:2048" sha256
chain ec "-algorithm EC -pkeyopt ec_paramgen_curve:P-384" "-algorithm EC -pkeyopt ec_paramgen_curve:P-384" \
  "-algorithm EC -pkeyopt ec_paramgen_curve:P-256" sha384
cp "$work/rsa-root.key" "$work/rsa4096.key"
cp "$work/ec-root.key" "$work/p384.key"
cp rsa-leaf.key "$work/rsa2048.key"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out "$work/rsa1024.key" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:4608 -out "$work/rsa4608.key" 2>/dev/null
printf 'Bramble verifies what the CA signed.\n' > message.bin
for key in rsa1024 rsa2048 rsa4096 rsa4608; do
  openssl rsa -in "$work/$key.key" -RSAPublicKey_out -outform DER -out "$key.pub.der" 2>/dev/null
  digests="sha256 sha384 sha512"
  case $key in rsa1024|rsa4608) digests=sha256 ;; esac
  for md in $digests; do
    openssl dgst -$md -sign "$work/$key.key" -out "sig-$key-pkcs1-$md.bin" message.bin
    openssl dgst -$md -sign "$work/$key.key" -sigopt rsa_padding_mode:pss \
      -sigopt rsa_pss_saltlen:digest -out "sig-$key-pss-$md.bin" message.bin
  done
done
# The SEC1 point is the last 97 bytes of the P-384 SubjectPublicKeyInfo.
openssl pkey -in "$work/p384.key" -pubout -outform DER | tail -c 97 > p384.pub.der
openssl dgst -sha384 -sign "$work/p384.key" -out sig-p384-sha384.bin message.bin
