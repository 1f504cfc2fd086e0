//! The common shape of a history line, read without serde.
//!
//! Nearly every line lockcheck reads is one lockcheck (or a harness that
//! copied its format) wrote: the fields in their usual order, no spaces, no
//! escapes, and a `value` that is `null` or a few integers and a string. [`parse`] reads
//! exactly that shape, three to four times faster than serde_json, and says
//! `None` for anything else: the line is then read by serde_json, which also
//! gives every error message. So a line read here is read as serde_json would
//! read it (a test holds the two to that), and nothing else is read here.

use std::borrow::Cow;

use crate::event::{EventRef, EventType, Function, PaymentFields, Process, ValueFields};

struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn literal(&mut self, expected: &[u8]) -> Option<()> {
        let end = self.at + expected.len();
        (self.text.get(self.at..end)? == expected).then(|| self.at = end)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    /// Digits as JSON writes an integer: no sign, no leading zero, no
    /// fraction or exponent after them.
    fn unsigned(&mut self) -> Option<u64> {
        let start = self.at;
        let mut value: u64 = 0;
        while let Some(byte @ b'0'..=b'9') = self.peek() {
            value = value.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.text[start] == b'0';
        let fraction = matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (digits > 0 && !leading_zero && !fraction).then_some(value)
    }

    fn signed(&mut self) -> Option<i64> {
        if self.peek() == Some(b'-') {
            self.at += 1;
            // serde_json reads `-0` as a float.
            let magnitude = self.unsigned().filter(|&magnitude| magnitude > 0)?;
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(self.unsigned()?).ok()
        }
    }

    /// The bytes of a quoted string of printable ASCII without escapes,
    /// without its quotes.
    fn plain_bytes(&mut self) -> Option<&'a [u8]> {
        self.literal(b"\"")?;
        let start = self.at;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' | 0..=0x1f | 0x7f..=0xff => return None,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        Some(&self.text[start..self.at - 1])
    }

    fn plain_string(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.plain_bytes()?).ok()
    }

    /// `true` or `false`.
    fn boolean(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.literal(b"true").map(|()| true),
            b'f' => self.literal(b"false").map(|()| false),
            _ => None,
        }
    }

    /// One field of the payments workload's, each once and of the type it
    /// is read as (anything else leaves the line to serde_json, which
    /// leaves out a field of another type).
    fn payment(&mut self, name: &str, fields: &mut PaymentFields) -> Option<()> {
        fn once<T>(slot: &mut Option<T>, value: Option<T>) -> Option<()> {
            if slot.is_some() {
                return None;
            }
            *slot = Some(value?);
            Some(())
        }
        match name {
            "due_ms" => once(&mut fields.due_ms, self.unsigned()),
            "message" => once(&mut fields.message, self.unsigned()),
            "delivery" => once(&mut fields.delivery, self.unsigned()),
            "redelivered" => once(&mut fields.redelivered, self.boolean()),
            "visibility_ms" => once(&mut fields.visibility_ms, self.unsigned()),
            "amount" => once(&mut fields.amount, self.signed()),
            "retention_ms" => once(&mut fields.retention_ms, self.unsigned()),
            "status" => once(&mut fields.status, self.unsigned()),
            "replayed" => once(&mut fields.replayed, self.boolean()),
            "idempotency_key" => {
                once(&mut fields.idempotency_key, self.plain_string().map(str::to_string))
            }
            "body" => once(&mut fields.body, self.plain_string().map(str::to_string)),
            "charge" => once(&mut fields.charge, self.plain_string().map(str::to_string)),
            _ => None,
        }
    }

    /// `null` or a plain string.
    fn optional_string(&mut self) -> Option<Option<&'a str>> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            Some(None)
        } else {
            self.plain_string().map(Some)
        }
    }

    /// `null`, or an object of the fields the checkers read that are
    /// integers, or a plain string (`data`), or the payments workload's
    /// integers, booleans and plain strings, each once (a repeated or any
    /// other field leaves the line to serde_json).
    fn value(&mut self) -> Option<ValueFields> {
        let mut fields = ValueFields::default();
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Some(fields);
        }
        self.literal(b"{")?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Some(fields);
        }
        loop {
            let name = self.plain_string()?;
            self.literal(b":")?;
            match name {
                "fence" if fields.fence.is_none() => fields.fence = Some(self.unsigned()?),
                "ttl_ms" if fields.ttl_ms.is_none() => fields.ttl_ms = Some(self.unsigned()?),
                "lock_delay_ms" if fields.lock_delay_ms.is_none() => {
                    fields.lock_delay_ms = Some(self.unsigned()?)
                }
                "elect_within_ms" if fields.elect_within_ms.is_none() => {
                    fields.elect_within_ms = Some(self.unsigned()?)
                }
                "version" if fields.version.is_none() => fields.version = Some(self.unsigned()?),
                "permits" if fields.permits.is_none() => {
                    fields.permits = Some(u32::try_from(self.unsigned()?).ok()?)
                }
                "data" if fields.data.is_none() => {
                    fields.data = Some(self.plain_string()?.to_string())
                }
                _ if PaymentFields::is_field(name) => {
                    self.payment(name, fields.payment.get_or_insert_with(Default::default))?
                }
                _ => return None,
            }
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => break,
                _ => return None,
            }
        }
        self.at += 1;
        Some(fields)
    }
}

/// Reads a line of the common shape:
/// `{"index":N,"time":N,"process":N|"nemesis","type":"…","f":"…","key":"…"|null,"value":null|{…}}`,
/// optionally with `"error":"…"|null` after `value`, and whitespace after the
/// closing brace. `None` for anything else. The event's `value` is left
/// unset: the reader uses only the fields returned beside it.
pub(crate) fn parse(line: &[u8]) -> Option<(EventRef<'_>, ValueFields)> {
    let mut cursor = Cursor { text: line, at: 0 };
    cursor.literal(b"{\"index\":")?;
    let index = cursor.unsigned()?;
    cursor.literal(b",\"time\":")?;
    let time_ns = cursor.unsigned()?;
    cursor.literal(b",\"process\":")?;
    let process = if cursor.peek() == Some(b'"') {
        (cursor.plain_string()? == "nemesis").then_some(Process::Nemesis)?
    } else {
        Process::Client(cursor.signed()?)
    };
    cursor.literal(b",\"type\":")?;
    let event_type = EventType::from_bytes(cursor.plain_bytes()?)?;
    cursor.literal(b",\"f\":")?;
    let f = Function::from_bytes(cursor.plain_bytes()?)?;
    cursor.literal(b",\"key\":")?;
    let key = cursor.optional_string()?;
    cursor.literal(b",\"value\":")?;
    let fields = cursor.value()?;
    let error = if cursor.peek() == Some(b',') {
        cursor.literal(b",\"error\":")?;
        cursor.optional_string()?
    } else {
        None
    };
    cursor.literal(b"}")?;
    if !line[cursor.at..].iter().all(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r')) {
        return None;
    }
    let event = EventRef {
        index,
        time_ns,
        process,
        event_type,
        f,
        key: key.map(Cow::Borrowed),
        value: None,
        error: error.map(Cow::Borrowed),
        extra: None,
    };
    Some((event, fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// What serde_json reads from the line, in the form `parse` gives.
    fn by_serde(line: &[u8]) -> Option<(String, ValueFields)> {
        let event = serde_json::from_slice::<EventRef<'_>>(line).ok()?;
        let fields = event.value_fields().ok()?;
        Some((describe(&event), fields))
    }

    fn describe(event: &EventRef<'_>) -> String {
        format!(
            "{} {} {:?} {:?} {:?} {:?} {:?}",
            event.index,
            event.time_ns,
            event.process,
            event.event_type,
            event.f,
            event.key,
            event.error
        )
    }

    const LINES: [&str; 13] = [
        r#"{"index":0,"time":1000000000,"process":1,"type":"invoke","f":"acquire","key":"report","value":{"ttl_ms":10000}}"#,
        r#"{"index":1,"time":1003000000,"process":1,"type":"ok","f":"acquire","key":"report","value":{"fence":33}}"#,
        r#"{"index":2,"time":2000000000,"process":"nemesis","type":"info","f":"start","key":null,"value":null}"#,
        r#"{"index":3,"time":7,"process":-4,"type":"fail","f":"acquire","key":"m","value":null,"error":"busy"}"#,
        r#"{"index":4,"time":8,"process":2,"type":"invoke","f":"acquire","key":"s","value":{"permits":3,"ttl_ms":5}}"#,
        r#"{"index":5,"time":9,"process":2,"type":"info","f":"frobnicate","key":"s","value":{},"error":null}"#,
        "{\"index\":6,\"time\":9,\"process\":2,\"type\":\"ok\",\"f\":\"release\",\"key\":\"s\",\"value\":null}  \r\n",
        r#"{"index":9,"time":10,"process":3,"type":"invoke","f":"write","key":"res-1","value":{"fence":1,"data":"w1"}}"#,
        r#"{"index":18446744073709551615,"time":0,"process":-9223372036854775808,"type":"ok","f":"read","key":"","value":null}"#,
        r#"{"index":10,"time":11,"process":4,"type":"invoke","f":"enqueue","key":"orders","value":{"data":"order-7","due_ms":20000}}"#,
        r#"{"index":11,"time":12,"process":5,"type":"ok","f":"deliver","key":"orders","value":{"data":"order-7","message":7,"delivery":2,"redelivered":true}}"#,
        r#"{"index":12,"time":13,"process":5,"type":"invoke","f":"charge","key":"provider","value":{"data":"order-7","amount":-4200,"idempotency_key":"order-7","body":"amount=4200","fence":3,"retention_ms":60000}}"#,
        r#"{"index":13,"time":14,"process":5,"type":"ok","f":"charge","key":"provider","value":{"charge":"ch_12","status":201,"replayed":false}}"#,
    ];

    #[test]
    fn reads_the_common_shape_as_serde_json_does() {
        for line in LINES {
            let (event, fields) = parse(line.as_bytes()).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(Some((describe(&event), fields)), by_serde(line.as_bytes()), "{line}");
        }
    }

    #[test]
    fn leaves_every_other_shape_to_serde_json() {
        for line in [
            r#"{"index":1, "time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"time":2,"index":1,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"index":01,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"index":1.0,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"index":18446744073709551616,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"index":1,"time":2,"process":9223372036854775808,"type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"index":1,"time":2,"process":"client","type":"ok","f":"acquire","key":"a","value":null}"#,
            r#"{"index":1,"time":2,"process":1,"type":"done","f":"acquire","key":"a","value":null}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a\"b","value":null}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"é","value":null}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":{"fence":1,"fence":2}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"write","key":"a","value":{"data":7}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"write","key":"a","value":{"data":"x","data":"y"}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"write","key":"a","value":{"fault":"pause"}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":{"permits":4294967296}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"charge","key":"p","value":{"status":"201"}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"charge","key":"p","value":{"status":201,"status":201}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"charge","key":"p","value":{"replayed":null}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"charge","key":"p","value":{"charge":12}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"invoke","f":"charge","key":"p","value":{"body":"{\"a\":1}"}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":7}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null,"trace":"x"}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null}x"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null"#,
        ] {
            assert!(parse(line.as_bytes()).is_none(), "{line}");
        }
    }

    /// Every line of the project's recorded histories that `parse` reads,
    /// serde_json reads the same, and `parse` reads most of them.
    #[test]
    fn reads_the_recorded_histories_as_serde_json_does() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../histories");
        let mut folders = vec![root];
        let (mut lines, mut read) = (0, 0);
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).expect("the histories folder is readable") {
                let path = entry.expect("a folder entry").path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|extension| extension == "jsonl") {
                    let text = std::fs::read(&path).expect("a history is readable");
                    for line in text.split(|&byte| byte == b'\n') {
                        lines += 1;
                        if let Some((event, fields)) = parse(line) {
                            read += 1;
                            let shown = String::from_utf8_lossy(line);
                            let expected = by_serde(line);
                            assert_eq!(Some((describe(&event), fields)), expected, "{shown}");
                        }
                    }
                }
            }
        }
        assert!(read * 2 > lines, "{read} of {lines} lines read");
    }

    /// Lines cut, spliced and with bytes changed at random: whatever `parse`
    /// reads, serde_json reads the same.
    #[test]
    fn never_reads_a_mutated_line_otherwise_than_serde_json() {
        let mut rng = SmallRng::seed_from_u64(3);
        let alphabet = b"{}[]\":,-.0123456789eEnul \\abcfiktvxyz\t\n\x01\xc3\xa9";
        let mut read = 0;
        for _ in 0..500_000 {
            let mut line = LINES[rng.gen_range(0..LINES.len())].as_bytes().to_vec();
            for _ in 0..rng.gen_range(1..=3) {
                let at = rng.gen_range(0..=line.len());
                match rng.gen_range(0..4) {
                    0 if at < line.len() => {
                        line.remove(at);
                    }
                    1 => line.insert(at, alphabet[rng.gen_range(0..alphabet.len())]),
                    2 if at < line.len() => line[at] = alphabet[rng.gen_range(0..alphabet.len())],
                    _ => {
                        let other = LINES[rng.gen_range(0..LINES.len())].as_bytes();
                        let from = rng.gen_range(0..other.len());
                        line.truncate(at);
                        line.extend_from_slice(&other[from..]);
                    }
                }
            }
            if let Some((event, fields)) = parse(&line) {
                read += 1;
                let text = String::from_utf8_lossy(&line);
                assert_eq!(Some((describe(&event), fields)), by_serde(&line), "{text}");
            }
        }
        assert!(read > 10_000, "only {read} mutated lines read");
    }
}
