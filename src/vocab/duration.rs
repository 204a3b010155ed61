//! Go duration syntax, as Linkerd's Link fields and annotations write it.
//!
//! Vocabulary shared by the Link reader, the clusters file and the config
//! file; pure, no I/O.

use std::time::Duration;

/// Parses a Go `time.ParseDuration` string (`3s`, `500ms`, `1m30s`, `1.5s`,
/// `2h`; units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`). A bare non-negative
/// integer is also taken, as seconds, because that is how the
/// `mirror.linkerd.io/probe-period` annotation link-gen reads is written.
/// Negative durations and ones beyond Go's limit (about 292 years) are
/// errors.
///
/// Written here because no maintained crate reads Go's syntax exactly
/// (`humantime` has no fractions and other units; the Go ports are
/// unmaintained and refuse the bare integers Linkerd writes).
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    if s.is_empty() {
        return Err("empty duration".to_owned());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("{s:?} is out of range"));
    }
    let bad = |why: &str| format!("{s:?} is not a Go duration: {why}");
    let (negative, mut rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest.is_empty() {
        return Err(bad("no number"));
    }
    // Go's limit: a Duration is an int64 count of nanoseconds.
    const MAX_NANOS: u128 = i64::MAX as u128;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, after) = component(rest).map_err(|why| bad(&why))?;
        rest = after;
        total = total
            .checked_add(nanos)
            .filter(|&t| t <= MAX_NANOS)
            .ok_or_else(|| bad("out of range"))?;
    }
    if negative && total != 0 {
        return Err(bad("negative"));
    }
    let nanos = u64::try_from(total).map_err(|_| bad("out of range"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Reads one `<number><unit>` component from the front of `rest`: its
/// nanoseconds and what follows it.
fn component(rest: &str) -> Result<(u128, &str), String> {
    let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (int_part, mut rest) = rest.split_at(int_len);
    let mut frac_part = "";
    if let Some(after) = rest.strip_prefix('.') {
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        (frac_part, rest) = after.split_at(n);
    }
    if int_part.is_empty() && frac_part.is_empty() {
        return Err("expected a number".to_owned());
    }
    let unit_len = rest
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(rest.len());
    let (unit, rest) = rest.split_at(unit_len);
    let unit_nanos = unit_nanos(unit)?;
    let out_of_range = || "out of range".to_owned();
    let int: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| out_of_range())?
    };
    let mut nanos = int.checked_mul(unit_nanos).ok_or_else(out_of_range)?;
    // Digits past the 18th are below a nanosecond even for hours.
    let frac_digits = &frac_part[..frac_part.len().min(18)];
    if !frac_digits.is_empty() {
        let frac: u128 = frac_digits.parse().map_err(|_| "bad fraction".to_owned())?;
        let scale = 10u128.pow(frac_digits.len() as u32);
        // The integer part alone may be just below u128::MAX.
        nanos = nanos
            .checked_add(frac * unit_nanos / scale)
            .ok_or_else(out_of_range)?;
    }
    Ok((nanos, rest))
}

/// Nanoseconds in one Go duration unit.
fn unit_nanos(unit: &str) -> Result<u128, String> {
    Ok(match unit {
        "ns" => 1,
        // Go accepts both the micro sign (U+00B5) and the Greek mu.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "" => return Err("missing unit (ns, us, ms, s, m or h)".to_owned()),
        other => return Err(format!("unknown unit {other:?} (ns, us, ms, s, m or h)")),
    })
}

#[cfg(test)]
mod tests;
