//! Secrets out of everything lockcheck writes or prints: [`redact`] replaces
//! the password of every URL (`postgres://user:pw@host/db` →
//! `postgres://user:***@host/db`, `redis://pw@host` → `redis://***@host`)
//! and the value of every password setting (`password=pw`, `PGPASSWORD=pw`,
//! `MYSQL_PWD=pw`, libpq's `password='p w'`) in a text by [`MASK`]. Every
//! output of the tool goes through it: standard output and error, the stored
//! files, the web pages.
//!
//! A URL's userinfo (what comes before the authority's last `@`) is read so:
//! * with a `:`, it is `user:password`: what follows the first `:` is
//!   masked, whatever it holds (`redis://:pw@h`, `postgres://u:p%40ss@h`);
//! * without one, it is a user name by the URL standard, and most clients
//!   read it so (libpq, MySQL, HTTP); but Redis has long had a password
//!   and no user, and Redis clients differ: Lettuce documents
//!   `redis://[[user:]password@]host`, ServiceStack.Redis reads
//!   `password@host`, where redis-rs and go-redis take a user name. So under
//!   a scheme of the Redis family (any that starts with `redis` or `valkey`:
//!   `rediss`, `redis+unix`, `redis-sentinel`, `valkeys`, …) it is masked
//!   whole;
//! * under any other scheme it is kept only when it looks like a user name:
//!   at most 32 characters (MySQL's and Linux's longest), all letters,
//!   digits, `.`, `_` or `-`, and none of the prefixes forges give the
//!   tokens that go there (`ghp_`, `github_pat_`, `glpat-`, …). Anything
//!   else (percent-escapes, longer, other characters) is masked whole:
//!   `postgres://postgres@h/db` and `mysql://root@h` stay as they are,
//!   `https://ghp_…@github.com` reads `https://***@github.com`.
//!
//! Masking a user name by mistake costs a replay its URL (it is then taken
//! from the environment); keeping a password would leak it, so the rule errs
//! on the side of masking.

/// What a redacted password reads as.
pub const MASK: &str = "***";

/// `text` with every password in it replaced by [`MASK`]:
/// * in a URL (`scheme://user:password@host`), the password, whatever it
///   holds (percent-encoded or not, `:` or `@` in it: the userinfo ends at
///   the authority's last `@`); a userinfo without `:` whole, unless it is
///   a user name (see the module's rule); a URL without a password is left
///   alone;
/// * in a `key=value` setting whose key ends with `password`, `passwd` or
///   `pwd` (any case: `password=`, `PGPASSWORD=`, `MYSQL_PWD=`,
///   `?password=` of a query string), the value, quoted (`'…'`, `"…"`,
///   with backslash escapes) or up to the next space, `&` or `;`.
///
/// It never fails: a text with nothing to redact comes back as it was.
pub fn redact(text: &str) -> String {
    redact_settings(&redact_urls(text))
}

/// Whether `text` holds something [`redact`] replaces.
pub fn has_secret(text: &str) -> bool {
    redact(text) != text
}

/// Characters that end a URL's authority besides its own `/`, `?`, `#`:
/// space and the quotes and brackets a URL is written between.
fn ends_authority(c: char) -> bool {
    c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>' | '\\')
}

fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .last()
            .map(|(index, _)| index);
        let authority_start = at + 3;
        if scheme_start.is_none() {
            // `://` with no scheme: not a URL.
            out.push_str(&rest[..authority_start]);
            rest = &rest[authority_start..];
            continue;
        }
        let authority = &rest[authority_start..];
        let mut end = authority.find(ends_authority).unwrap_or(authority.len());
        if authority[..end].ends_with(':') && authority[end..].starts_with("//") {
            // `a@h1,redis://…`: the next URL of a list begins here.
            let scheme = authority[..end - 1]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                .count();
            if scheme > 0 {
                end -= scheme + 1;
            }
        }
        let authority = &authority[..end];
        let scheme = &rest[scheme_start.unwrap_or(at)..at];
        out.push_str(&rest[..authority_start]);
        match authority.rfind('@') {
            Some(last) => match authority[..last].find(':') {
                Some(colon) => {
                    out.push_str(&authority[..=colon]);
                    out.push_str(MASK);
                    out.push_str(&authority[last..]);
                }
                None if is_user_name(scheme, &authority[..last]) => out.push_str(authority),
                None => {
                    out.push_str(MASK);
                    out.push_str(&authority[last..]);
                }
            },
            None => out.push_str(authority),
        }
        rest = &rest[authority_start + end..];
    }
    out.push_str(rest);
    out
}

/// Prefixes of the tokens forges hand out to be put where a URL's user name
/// goes (`https://TOKEN@host/…`): GitHub's, GitLab's, Hugging Face's.
const TOKEN_PREFIXES: [&str; 9] =
    ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-", "hf_"];

/// Whether `userinfo`, a URL's userinfo without `:`, is a user name to keep
/// rather than a secret to mask (the module's rule): never under a scheme
/// of the Redis family, whose clients read it as the password; elsewhere
/// when it looks like one. An empty userinfo holds nothing to mask.
fn is_user_name(scheme: &str, userinfo: &str) -> bool {
    let scheme = scheme.to_ascii_lowercase();
    if userinfo.is_empty() {
        return true;
    }
    if scheme.starts_with("redis") || scheme.starts_with("valkey") {
        return false;
    }
    userinfo.len() <= 32
        && userinfo
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
        && !TOKEN_PREFIXES.iter().any(|prefix| userinfo.starts_with(prefix))
}

/// Whether `key` names a password setting.
fn is_password_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "pwd"].iter().any(|end| key.ends_with(end))
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn redact_settings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(offset) = text[at..].find('=') {
        let equals = at + offset;
        at = equals + 1;
        // The key: the word just before `=` (spaces allowed between).
        let before = text[..equals].trim_end_matches(' ');
        let key_start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_key_char(*c))
            .last()
            .map_or(before.len(), |(index, _)| index);
        if !is_password_key(&before[key_start..]) {
            continue;
        }
        let mut value_start = equals + 1;
        while bytes.get(value_start) == Some(&b' ') {
            value_start += 1;
        }
        let value_end = match bytes.get(value_start) {
            Some(&quote @ (b'\'' | b'"')) => {
                // Quoted, backslash escapes: to the closing quote (kept).
                let mut end = value_start + 1;
                let mut escaped = false;
                while let Some(&byte) = bytes.get(end) {
                    match byte {
                        b'\\' if !escaped => escaped = true,
                        byte if byte == quote && !escaped => break,
                        _ => escaped = false,
                    }
                    end += 1;
                }
                out.push_str(&text[copied..=value_start]);
                out.push_str(MASK);
                copied = end.min(text.len());
                at = (end + 1).min(text.len());
                continue;
            }
            _ => text[value_start..]
                .find(|c: char| c.is_whitespace() || matches!(c, '&' | ';' | '"' | '\'' | '<'))
                .map_or(text.len(), |end| value_start + end),
        };
        if value_end == value_start || text[value_start..value_end] == *MASK {
            continue;
        }
        out.push_str(&text[copied..value_start]);
        out.push_str(MASK);
        copied = value_end;
        at = value_end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_masked() {
        for (text, expected) in [
            ("postgres://postgres:pw@127.0.0.1/test", "postgres://postgres:***@127.0.0.1/test"),
            ("redis://:secret@127.0.0.1:6379", "redis://:***@127.0.0.1:6379"),
            ("redis://default:secret@host:6379/0", "redis://default:***@host:6379/0"),
            ("mysql://root:pw@127.0.0.1:3306/test", "mysql://root:***@127.0.0.1:3306/test"),
            ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
            ("postgres://u:p%40ss%3Aw@host/db", "postgres://u:***@host/db"),
            ("postgres://u:p@ss@host/db", "postgres://u:***@host/db"),
            ("postgres://u:p:a:ss@host/db", "postgres://u:***@host/db"),
            ("postgres://u:p@:ss@[fe80::1%25eth0]:5432", "postgres://u:***@[fe80::1%25eth0]:5432"),
            ("http://u:pw@h:2379?x=1", "http://u:***@h:2379?x=1"),
            (
                "--redis-url redis://:a@h1:1,redis://:b@h2:2,redis://h3:3 --x",
                "--redis-url redis://:***@h1:1,redis://:***@h2:2,redis://h3:3 --x",
            ),
            (
                "error connecting to \"postgres://u:pw@h/db\": refused",
                "error connecting to \"postgres://u:***@h/db\": refused",
            ),
            ("<a href='postgres://u:pw@h'>", "<a href='postgres://u:***@h'>"),
            ("postgres://u:@h/db", "postgres://u:***@h/db"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
            assert!(has_secret(text), "{text}");
        }
    }

    #[test]
    fn a_userinfo_without_a_colon_is_masked_unless_it_is_a_user_name() {
        for (text, expected) in [
            ("redis://S3cretPW@127.0.0.1:6379", "redis://***@127.0.0.1:6379"),
            ("rediss://pw@h", "rediss://***@h"),
            ("REDIS://pw@h:1/0", "REDIS://***@h:1/0"),
            ("valkey://pw@h", "valkey://***@h"),
            ("redis+sentinel://pw@h", "redis+sentinel://***@h"),
            // Redis clients that read a lone userinfo as a user name make
            // it `default` or an ACL user; masking it costs nothing.
            ("redis://default@h", "redis://***@h"),
            ("redis://a@h1,redis://b@h2", "redis://***@h1,redis://***@h2"),
            ("redis://a@h1,redis://h2,rediss://c@h3", "redis://***@h1,redis://h2,rediss://***@h3"),
            ("redis://p%40ss%3Aw@h", "redis://***@h"),
            ("redis://p@ss@h", "redis://***@h"),
            (
                "--redis-url redis://S3cretPW@127.0.0.1:6379 --x",
                "--redis-url redis://***@127.0.0.1:6379 --x",
            ),
            // Not a user name: percent-escapes, other characters, too long, a token.
            ("postgres://us%40er@h/db", "postgres://***@h/db"),
            ("postgres://p!ss@h/db", "postgres://***@h/db"),
            ("mysql://p@ss@h/db", "mysql://***@h/db"),
            ("postgres://aVeryLongRandomLookingSecret0123456@h/db", "postgres://***@h/db"),
            (
                "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r.git",
                "https://***@github.com/o/r.git",
            ),
            ("https://glpat-abcdefghij0123456789@gitlab.com", "https://***@gitlab.com"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
            assert!(has_secret(text), "{text}");
            assert_eq!(redact(expected), expected, "{text}: masked once only");
        }
        for text in [
            "postgres://postgres@h/db",
            "postgresql://app_user@[::1]:5432/db",
            "mysql://root@h",
            "mariadb://root@127.0.0.1:3306/test",
            "http://etcd-user@127.0.0.1:2379",
            "https://git@example.com/o/r.git",
            "ssh://deploy.bot@h",
            "postgres://abcdefghijklmnopqrstuvwxyz012345@h",
            "redis://@h",
        ] {
            assert_eq!(redact(text), text, "{text}");
        }
    }

    #[test]
    fn urls_without_a_password_are_left_alone() {
        for text in [
            "postgres://postgres@127.0.0.1/test",
            "postgres://127.0.0.1:5432/test",
            "postgresql://[::1]:5432/db",
            "postgresql://u@[::1]:5432/db",
            "redis://127.0.0.1:6379",
            "http://127.0.0.1:2379,http://127.0.0.1:2380",
            "mailto:someone@example.com and a@b:c",
            "://u:pw@host",
            "plain text, a time 12:30 and user@host",
            "",
            "é://ü:ö@ä",
        ] {
            assert_eq!(redact(text), text, "{text}");
            assert!(!has_secret(text), "{text}");
        }
    }

    #[test]
    fn password_settings_are_masked() {
        for (text, expected) in [
            ("host=h password=pw user=u", "host=h password=*** user=u"),
            ("host=h password = pw dbname=d", "host=h password = *** dbname=d"),
            ("host=h password='p w\\' x' user=u", "host=h password='***' user=u"),
            ("password=\"a b\"", "password=\"***\""),
            ("PGPASSWORD=hunter2 lockcheck check", "PGPASSWORD=*** lockcheck check"),
            ("MYSQL_PWD=hunter2", "MYSQL_PWD=***"),
            ("db_passwd=x;next=1", "db_passwd=***;next=1"),
            (
                "postgres://h/db?sslmode=disable&password=pw&x=1",
                "postgres://h/db?sslmode=disable&password=***&x=1",
            ),
            ("{\"conn\":\"host=h password=pw\"}", "{\"conn\":\"host=h password=***\"}"),
            ("password='unterminated", "password='***"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn redaction_is_idempotent_and_leaves_other_settings() {
        for text in [
            "postgres://u:pw@h/db password=x",
            "host=h password=pw",
            "user=u dbname=test sslmode=disable",
            "password= ",
            "password=",
            "=password",
            "a==b password==c",
        ] {
            let once = redact(text);
            assert_eq!(redact(&once), once, "{text}");
        }
        assert_eq!(redact("user=u dbname=test"), "user=u dbname=test");
        assert_eq!(redact("password authentication failed"), "password authentication failed");
    }
}
