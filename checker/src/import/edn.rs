//! A reader for the part of EDN that Jepsen histories use: maps, vectors,
//! lists, sets, keywords, strings, integers, floats, nil, booleans, symbols,
//! tagged literals (read as their value) and comments.

use std::fmt;

/// An EDN value. Maps keep their entries in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Edn {
    Nil,
    Bool(bool),
    Integer(i64),
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

/// Reads EDN values one after another from a text.
#[derive(Debug)]
pub struct EdnReader<'a> {
    text: &'a [u8],
    at: usize,
    line: u64,
    line_start: usize,
}

/// Nesting deeper than this is refused rather than overflowing the stack.
const MAX_DEPTH: usize = 128;

fn is_delimiter(byte: u8) -> bool {
    byte.is_ascii_whitespace() || b",()[]{}\";".contains(&byte)
}

impl<'a> EdnReader<'a> {
    pub fn new(text: &'a str) -> Self {
        EdnReader { text: text.as_bytes(), at: 0, line: 1, line_start: 0 }
    }

    /// The line the reader is on (1-based).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn error(&self, message: impl Into<String>) -> EdnError {
        EdnError {
            line: self.line,
            column: (self.at - self.line_start + 1) as u64,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        if byte == b'\n' {
            self.line += 1;
            self.line_start = self.at;
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
        self.skip_blank();
        self.peek()?;
        Some(self.value(0))
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
        let start = self.at;
        while self.peek().is_some_and(|byte| !is_delimiter(byte)) {
            self.bump();
        }
        String::from_utf8_lossy(&self.text[start..self.at]).into_owned()
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
                if let Ok(value) = number.parse::<i64>() {
                    Edn::Integer(value)
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
}
