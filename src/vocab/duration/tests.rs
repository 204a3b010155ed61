use super::*;

#[test]
fn go_durations() {
    let ms = Duration::from_millis;
    let ns = Duration::from_nanos;
    let ok: Vec<(&str, Duration)> = vec![
        ("3s", ms(3_000)),
        ("500ms", ms(500)),
        ("1m30s", ms(90_000)),
        ("1.5s", ms(1_500)),
        (".5s", ms(500)),
        ("1.s", ms(1_000)),
        ("2h", ms(7_200_000)),
        ("1h2m3s4ms5us6ns", ns(3_723_004_005_006)),
        ("7\u{b5}s", ns(7_000)),
        ("7\u{3bc}s", ns(7_000)),
        ("7us", ns(7_000)),
        ("+5s", ms(5_000)),
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("-0s", Duration::ZERO),
        // Bare integers are seconds (link-gen's probe-period annotation).
        ("3", ms(3_000)),
        ("30", ms(30_000)),
        ("1.0000000001s", ns(1_000_000_000)),
        ("0.000000001s", ns(1)),
        ("2562047h", Duration::from_secs(2_562_047 * 3600)),
    ];
    for (s, want) in ok {
        assert_eq!(parse_go_duration(s), Ok(want), "{s}");
    }
    let bad: Vec<(&str, &str)> = vec![
        ("", "empty"),
        ("s", "expected a number"),
        ("1.5", "missing unit"),
        ("3 s", "unknown unit \" s\""),
        ("3sec", "unknown unit \"sec\""),
        ("3d", "unknown unit \"d\""),
        ("-3s", "negative"),
        ("-", "no number"),
        ("+", "no number"),
        ("3s.", "expected a number"),
        ("..5s", "expected a number"),
        ("2562048h", "out of range"),
        ("99999999999999999999999999999999999999999h", "out of range"),
        ("99999999999999999999999", "out of range"),
        // The integer part times the unit fits a u128, the fraction tips it
        // over (found by fuzzing: it overflowed, and wrapped to 0.13 s in
        // release builds).
        ("340282366920938463463374607431.9s", "out of range"),
        ("94522879700260684295381835.9h", "out of range"),
    ];
    for (s, want) in bad {
        let err = parse_go_duration(s).expect_err(s);
        assert!(err.contains(want), "{s}: {err}");
    }
}
