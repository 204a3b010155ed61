//! TSIG round trips and refusals; interoperation with Knot and kdig is in
//! `tests/integration/transfer.rs`.

use super::*;
use crate::dns::notify::message;

fn key(name: &str, secret: &[u8]) -> TsigKey {
    TsigKey {
        name: name.to_owned(),
        algorithm: TsigAlgorithm::HmacSha256,
        secret: secret.to_vec(),
    }
}

const NOW: u64 = 1_795_000_000;

#[test]
fn a_signed_request_checks_and_every_failure_has_its_reason() {
    let k = key("xfr-key", b"0123456789abcdef0123456789abcdef");
    let mut m = message("clusterset.local", 77, None);
    sign_request(&mut m, &k, NOW);
    let keys = [k.clone()];
    assert!(verify(&m, &keys, NOW).is_ok());
    assert!(verify(&m, &keys, NOW + 299).is_ok(), "within the fudge");
    let other = [key("xfr-key", b"another secret, same name.......")];
    let unknown = [key("other-key", b"0123456789abcdef0123456789abcdef")];
    let mut tampered = m.clone();
    tampered[HEADER_LEN + 1] ^= 0x20; // a letter of the question's case
    let mut changed = m.clone();
    changed[HEADER_LEN + 2] = b'x';
    let unsigned = message("clusterset.local", 77, None);
    type Case<'a> = (&'a str, &'a [u8], &'a [TsigKey], u64, TsigError);
    let cases: [Case<'_>; 5] = [
        ("another secret", &m, &other, NOW, TsigError::BadSig),
        ("a key we do not have", &m, &unknown, NOW, TsigError::BadKey),
        ("past the fudge", &m, &keys, NOW + 301, TsigError::BadTime),
        ("a changed message", &changed, &keys, NOW, TsigError::BadSig),
        ("no TSIG", &unsigned, &keys, NOW, TsigError::Unsigned),
    ];
    for (name, msg, keys, now, want) in cases {
        assert_eq!(verify(msg, keys, now).map(|_| ()), Err(want), "{name}");
    }
    // The case of a name is no part of the message's meaning, but it is
    // of the MAC: a tampered byte anywhere fails.
    assert_eq!(
        verify(&tampered, &keys, NOW).map(|_| ()),
        Err(TsigError::BadSig)
    );
}

#[test]
fn answer_messages_are_signed_in_a_chain() {
    let k = key("xfr-key", b"0123456789abcdef0123456789abcdef");
    let mut request = message("clusterset.local", 5, None);
    sign_request(&mut request, &k, NOW);
    let keys = [k.clone()];
    let v = verify(&request, &keys, NOW).expect("signed");
    let mut messages = vec![
        message("clusterset.local", 5, None),
        message("clusterset.local", 5, None),
    ];
    for m in &mut messages {
        m[2] |= 0x80; // responses
    }
    let unsigned = messages.clone();
    let mut signer = Signer::new(&v, NOW);
    messages.iter_mut().for_each(|m| signer.sign(m));
    for (m, before) in messages.iter().zip(&unsigned) {
        let r = find(m).expect("a TSIG record last");
        assert_eq!(r.name, "xfr-key");
        assert_eq!(r.mac.len(), 32, "HMAC-SHA256");
        assert_eq!(&m[..r.at][12..], &before[12..], "the message is kept");
    }
    // The first MAC covers the request's MAC, so a second answer signed
    // over another request's MAC differs.
    let first = find(&messages[0]).expect("tsig").mac.to_vec();
    let mut again = unsigned.clone();
    let other = Verified {
        key: &keys[0],
        mac: vec![0; 32],
    };
    let mut signer = Signer::new(&other, NOW);
    again.iter_mut().for_each(|m| signer.sign(m));
    assert_ne!(find(&again[0]).expect("tsig").mac, &first[..]);
}

#[test]
fn a_failed_signature_gets_notauth_with_the_tsig_error() {
    let k = key("xfr-key", b"0123456789abcdef0123456789abcdef");
    let mut m = message("clusterset.local", 9, None);
    sign_request(&mut m, &k, NOW);
    let answer = notauth(&m, &[], TsigError::BadKey, NOW).expect("an answer");
    assert_eq!(&answer[0..2], &[0, 9], "the id");
    assert_eq!(be16(&answer, 2).map(|f| f & 0x800F), Some(0x8000 | NOTAUTH));
    let r = find(&answer).expect("a TSIG record");
    assert_eq!((r.name.as_str(), r.error, r.mac.len()), ("xfr-key", 17, 0));
    let unsigned = notauth(
        &message("clusterset.local", 9, None),
        &[k],
        TsigError::Unsigned,
        NOW,
    )
    .expect("an answer");
    assert!(find(&unsigned).is_none(), "no TSIG for an unsigned request");
}
