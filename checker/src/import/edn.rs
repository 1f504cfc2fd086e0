//! A reader for the part of EDN that Jepsen histories use: maps, vectors,
//! lists, sets, keywords, strings, integers, floats, nil, booleans, symbols,
//! tagged literals (read as their value) and comments.

use std::fmt;
use std::io::{self, BufRead};

/// An EDN value. Maps keep their entries in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Edn {
    Nil,
    Bool(bool),
    Integer(i64),
    /// An integer literal out of the range of i64, as written.
    BigInteger(String),
    Float(f64),
    String(String),
    Keyword(String),
    Symbol(String),
    Vector(Vec<Edn>),
    List(Vec<Edn>),
    Set(Vec<Edn>),
    Map(Vec<(Edn, Edn)>),
}

impl Edn {
    /// The value under a keyword key of a map (`:process` → `get("process")`).
    pub fn get(&self, keyword: &str) -> Option<&Edn> {
        match self {
            Edn::Map(entries) => entries
                .iter()
                .find(|(key, _)| matches!(key, Edn::Keyword(name) if name == keyword))
                .map(|(_, value)| value),
            _ => None,
        }
    }

    pub fn as_keyword(&self) -> Option<&str> {
        match self {
            Edn::Keyword(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for Edn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = |f: &mut fmt::Formatter<'_>, open: &str, items: &[Edn], close: &str| {
            f.write_str(open)?;
            for (at, item) in items.iter().enumerate() {
                if at > 0 {
                    f.write_str(" ")?;
                }
                write!(f, "{item}")?;
            }
            f.write_str(close)
        };
        match self {
            Edn::Nil => f.write_str("nil"),
            Edn::Bool(value) => write!(f, "{value}"),
            Edn::Integer(value) => write!(f, "{value}"),
            Edn::BigInteger(digits) => f.write_str(digits),
            Edn::Float(value) => write!(f, "{value}"),
            Edn::String(value) => write!(f, "{value:?}"),
            Edn::Keyword(name) => write!(f, ":{name}"),
            Edn::Symbol(name) => f.write_str(name),
            Edn::Vector(items) => seq(f, "[", items, "]"),
            Edn::List(items) => seq(f, "(", items, ")"),
            Edn::Set(items) => seq(f, "#{", items, "}"),
            Edn::Map(entries) => {
                f.write_str("{")?;
                for (at, (key, value)) in entries.iter().enumerate() {
                    if at > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{key} {value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Where reading failed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdnError {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

impl fmt::Display for EdnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Reads EDN values one after another, streaming from any [`BufRead`]: it
/// holds one value at a time, never the whole text.
#[derive(Debug)]
pub struct EdnReader<R> {
    input: R,
    line: u64,
    column: u64,
    /// Inside a top-level vector or list read element by element: its closer.
    open_top: Option<u8>,
    io_error: Option<String>,
}

/// Nesting deeper than this is refused rather than overflowing the stack.
const MAX_DEPTH: usize = 128;

fn is_delimiter(byte: u8) -> bool {
    byte.is_ascii_whitespace() || b",()[]{}\";".contains(&byte)
}

impl<'a> EdnReader<&'a [u8]> {
    pub fn new(text: &'a str) -> Self {
        EdnReader::from_reader(text.as_bytes())
    }
}

impl<R: BufRead> EdnReader<R> {
    pub fn from_reader(input: R) -> Self {
        EdnReader { input, line: 1, column: 1, open_top: None, io_error: None }
    }

    /// The line the reader is on (1-based).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn error(&self, message: impl Into<String>) -> EdnError {
        let message = match &self.io_error {
            Some(error) => format!("cannot read: {error}"),
            None => message.into(),
        };
        EdnError { line: self.line, column: self.column, message }
    }

    fn peek(&mut self) -> Option<u8> {
        loop {
            match self.input.fill_buf() {
                Ok(buffer) => return buffer.first().copied(),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    self.io_error = Some(error.to_string());
                    return None;
                }
            }
        }
    }

    fn bump(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.input.consume(1);
        if byte == b'\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(byte)
    }

    fn skip_blank(&mut self) {
        while let Some(byte) = self.peek() {
            if byte.is_ascii_whitespace() || byte == b',' {
                self.bump();
            } else if byte == b';' {
                while self.peek().is_some_and(|byte| byte != b'\n') {
                    self.bump();
                }
            } else {
                break;
            }
        }
    }

    /// The next top-level value, or `None` at the end of the text.
    pub fn next_value(&mut self) -> Option<Result<Edn, EdnError>> {
        self.next_value_at().map(|value| value.map(|(_, value)| value))
    }

    /// The next top-level value and the line it starts on.
    pub fn next_value_at(&mut self) -> Option<Result<(u64, Edn), EdnError>> {
        self.skip_blank();
        if self.peek().is_none() {
            return self.io_error.as_ref().map(|_| Err(self.error("")));
        }
        let line = self.line;
        Some(self.value(0).map(|value| (line, value)))
    }

    /// The next element, where a top-level vector or list is read element by
    /// element (a history written as `[{…}\n{…}]`) and any other top-level
    /// value is an element itself; with the line the element starts on.
    pub fn next_element(&mut self) -> Option<Result<(u64, Edn), EdnError>> {
        loop {
            self.skip_blank();
            let Some(close) = self.open_top else {
                match self.peek() {
                    Some(open @ (b'[' | b'(')) => {
                        self.bump();
                        self.open_top = Some(if open == b'[' { b']' } else { b')' });
                        continue;
                    }
                    _ => return self.next_value_at(),
                }
            };
            match self.peek() {
                None => {
                    self.open_top = None;
                    return Some(Err(self.error(format!("missing {:?}", close as char))));
                }
                Some(byte) if byte == close => {
                    self.bump();
                    self.open_top = None;
                }
                Some(_) => {
                    let line = self.line;
                    return Some(self.value(1).map(|value| (line, value)));
                }
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Edn, EdnError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.skip_blank();
        let Some(byte) = self.peek() else {
            return Err(self.error("unexpected end of input"));
        };
        match byte {
            b'{' => {
                self.bump();
                let items = self.sequence(b'}', depth)?;
                if items.len() % 2 != 0 {
                    return Err(self.error("a map needs an even number of forms"));
                }
                let mut entries = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(key), Some(value)) = (items.next(), items.next()) {
                    entries.push((key, value));
                }
                Ok(Edn::Map(entries))
            }
            b'[' => {
                self.bump();
                Ok(Edn::Vector(self.sequence(b']', depth)?))
            }
            b'(' => {
                self.bump();
                Ok(Edn::List(self.sequence(b')', depth)?))
            }
            b'"' => self.string(),
            b'#' => self.dispatch(depth),
            b':' => {
                self.bump();
                let name = self.token();
                if name.is_empty() {
                    return Err(self.error("empty keyword"));
                }
                Ok(Edn::Keyword(name))
            }
            b')' | b']' | b'}' => Err(self.error(format!("unexpected {:?}", byte as char))),
            _ => self.atom(),
        }
    }

    fn sequence(&mut self, close: u8, depth: usize) -> Result<Vec<Edn>, EdnError> {
        let mut items = Vec::new();
        loop {
            self.skip_blank();
            match self.peek() {
                None => return Err(self.error(format!("missing {:?}", close as char))),
                Some(byte) if byte == close => {
                    self.bump();
                    return Ok(items);
                }
                Some(_) => items.push(self.value(depth + 1)?),
            }
        }
    }

    fn dispatch(&mut self, depth: usize) -> Result<Edn, EdnError> {
        self.bump();
        match self.peek() {
            Some(b'{') => {
                self.bump();
                Ok(Edn::Set(self.sequence(b'}', depth)?))
            }
            Some(b'_') => {
                // #_ discards the next form.
                self.bump();
                self.value(depth + 1)?;
                self.value(depth)
            }
            Some(byte) if byte.is_ascii_alphabetic() => {
                // A tagged literal such as #inst "…" or #jepsen.history.Op{…}:
                // the tag is dropped, the value kept.
                self.token();
                self.value(depth + 1)
            }
            _ => Err(self.error("unknown # form")),
        }
    }

    fn token(&mut self) -> String {
        let mut bytes = Vec::new();
        while let Some(byte) = self.peek().filter(|&byte| !is_delimiter(byte)) {
            bytes.push(byte);
            self.bump();
        }
        String::from_utf8(bytes)
            .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
    }

    fn string(&mut self) -> Result<Edn, EdnError> {
        self.bump();
        let mut bytes = Vec::new();
        loop {
            match self.bump() {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => match self.bump() {
                    Some(b'n') => bytes.push(b'\n'),
                    Some(b't') => bytes.push(b'\t'),
                    Some(b'r') => bytes.push(b'\r'),
                    Some(other) => bytes.push(other),
                    None => return Err(self.error("unterminated string")),
                },
                Some(byte) => bytes.push(byte),
            }
        }
        String::from_utf8(bytes).map(Edn::String).map_err(|_| self.error("string is not UTF-8"))
    }

    fn atom(&mut self) -> Result<Edn, EdnError> {
        let token = self.token();
        if token.is_empty() {
            let byte = self.peek().unwrap_or(b' ');
            self.bump();
            return Err(self.error(format!("unexpected {:?}", byte as char)));
        }
        Ok(match token.as_str() {
            "nil" => Edn::Nil,
            "true" => Edn::Bool(true),
            "false" => Edn::Bool(false),
            _ => {
                let number = token.trim_end_matches(['N', 'M']);
                let digits = number.strip_prefix(['-', '+']).unwrap_or(number);
                if let Ok(value) = number.parse::<i64>() {
                    Edn::Integer(value)
                } else if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
                    // Beyond 64 bits: still an integer, not a float.
                    Edn::BigInteger(number.to_string())
                } else if number.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+')
                    && number.parse::<f64>().is_ok()
                {
                    Edn::Float(number.parse().unwrap_or_default())
                } else {
                    Edn::Symbol(token)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_jepsen_operations() {
        let text = r#"{:process 0, :type :invoke, :f :cas, :value [1 4], :time 12}
            ; a comment
            {:process :nemesis :type :info :f :start :value #{"n1" "n2"}}
            #jepsen.history.Op{:index 3 :process 1 :type :ok :f :read :value nil}"#;
        let mut reader = EdnReader::new(text);
        let first = reader.next_value().unwrap().unwrap();
        assert_eq!(first.get("process"), Some(&Edn::Integer(0)));
        assert_eq!(first.get("value"), Some(&Edn::Vector(vec![Edn::Integer(1), Edn::Integer(4)])));
        let second = reader.next_value().unwrap().unwrap();
        assert_eq!(second.get("process").and_then(Edn::as_keyword), Some("nemesis"));
        let third = reader.next_value().unwrap().unwrap();
        assert_eq!(third.get("value"), Some(&Edn::Nil));
        assert!(reader.next_value().is_none());
    }

    #[test]
    fn errors_say_where() {
        let error = EdnReader::new("{:a 1\n :b").next_value().unwrap().unwrap_err();
        assert_eq!((error.line, error.message.as_str()), (2, "missing '}'"));
        assert!(EdnReader::new("[[[[").next_value().unwrap().is_err());
        let deep = "[".repeat(10_000);
        assert!(EdnReader::new(&deep).next_value().unwrap().is_err());
    }

    #[test]
    fn integers_beyond_64_bits_stay_integers() {
        let mut reader = EdnReader::new("18446744073709551616 -99999999999999999999N 1.5 1e3");
        let big = reader.next_value().unwrap().unwrap();
        assert_eq!(big, Edn::BigInteger("18446744073709551616".to_string()));
        let negative = reader.next_value().unwrap().unwrap();
        assert_eq!(negative, Edn::BigInteger("-99999999999999999999".to_string()));
        assert_eq!(reader.next_value().unwrap().unwrap(), Edn::Float(1.5));
        assert_eq!(reader.next_value().unwrap().unwrap(), Edn::Float(1000.0));
    }

    #[test]
    fn a_top_level_vector_is_read_element_by_element_with_their_lines() {
        let text = "[{:a 1}\n {:b 2}\n\n {:c\n 3}]\n{:d 4}\n[5";
        let mut reader = EdnReader::new(text);
        let lines: Vec<u64> = (0..4).map(|_| reader.next_element().unwrap().unwrap().0).collect();
        assert_eq!(lines, [1, 2, 4, 6]);
        assert_eq!(reader.next_element().unwrap().unwrap(), (7, Edn::Integer(5)));
        let error = reader.next_element().unwrap().unwrap_err();
        assert_eq!(error.message, "missing ']'");
        assert!(reader.next_element().is_none());
    }
}
