//! The validity period of an X.509 certificate, read from its DER.
//!
//! webpki checks names and signatures but keeps the dates to itself, and a
//! whole X.509 parser is a large dependency for two fields. This reads
//! just enough of the `TBSCertificate` to reach `validity` (RFC 5280
//! §4.1): the optional version, the serial, the signature algorithm and
//! the issuer are stepped over. The input is the operator's own file, and
//! anything unexpected is `None`, never a panic.

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// `notBefore` and `notAfter` of a DER certificate, in Unix seconds.
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    let (certificate, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let (tag, _, after_version) = element(tbs)?;
    let rest = if tag == VERSION { after_version } else { tbs };
    let (_serial, rest) = expect(rest, INTEGER)?;
    let (_signature, rest) = expect(rest, SEQUENCE)?;
    let (_issuer, rest) = expect(rest, SEQUENCE)?;
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (tag, not_before, rest) = element(validity)?;
    let not_before = time(tag, not_before)?;
    let (tag, not_after, _) = element(rest)?;
    Some((not_before, time(tag, not_after)?))
}

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (len, rest) = rest.split_at(octets);
        let len = len.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b));
        (len, rest)
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The contents of an element with `tag`, and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match element(input)? {
        (found, contents, rest) if found == tag => Some((contents, rest)),
        _ => None,
    }
}

/// A `UTCTime` (`YYMMDDHHMMSSZ`, years 1950–2049) or `GeneralizedTime`
/// (`YYYYMMDDHHMMSSZ`), the only forms RFC 5280 allows, in Unix seconds.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| {
        digits[range]
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'))
    };
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = number(0..2);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (number(0..4), 4),
        _ => return None,
    };
    let field = |i: usize| number(rest + 2 * i..rest + 2 * i + 2);
    let (month, day, hour, minute, second) = (field(0), field(1), field(2), field(3), field(4));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn dates_of_both_forms_are_read() {
        // 2000-01-01 and 2049-12-31 are UTCTime; 2050 and later are
        // GeneralizedTime (RFC 5280 §4.1.2.5).
        let cases = [
            ((2000, 1, 1), (2049, 12, 31), (946_684_800, 2_524_521_600)),
            ((1970, 1, 1), (2050, 1, 1), (0, 2_524_608_000)),
            (
                (2024, 2, 29),
                (9999, 12, 31),
                (1_709_164_800, 253_402_214_400),
            ),
        ];
        for (from, to, expected) in cases {
            assert_eq!(
                validity(&certificate(from, to)),
                Some(expected),
                "{from:?}–{to:?}"
            );
        }
    }

    #[test]
    fn anything_else_is_none() {
        let der = certificate((2000, 1, 1), (2030, 1, 1));
        for cut in [0, 1, 2, 10, 40, 100] {
            assert_eq!(validity(&der[..cut.min(der.len())]), None, "cut at {cut}");
        }
        assert_eq!(validity(b"not DER at all"), None);
        assert_eq!(time(UTC_TIME, b"991231235959"), None, "no Z");
        assert_eq!(time(UTC_TIME, b"9912312359+9Z"), None, "not digits");
        assert_eq!(time(GENERALIZED_TIME, b"991231235959Z"), None, "too short");
        assert_eq!(time(UTC_TIME, b"991331235959Z"), None, "month 13");
        assert_eq!(time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(UTC_TIME, b"500101000000Z"), Some(-631_152_000));
    }
}
