//! Text another server sent, made safe to repeat. An error body hale quotes — in
//! a log line, an event, an API answer, the CLI's output — may hold what the
//! request carried: a proxy or a test server that echoes the request's headers,
//! a BMC that echoes the session body holding the password, an API server that
//! quotes the token it refused. [`Secrets::scrub`] blanks the secrets the adapter
//! knows, in each form they travel in (as they are, JSON-escaped, `user:password`
//! in base64), and whatever follows an authorization header or scheme, whether
//! the secret is known or not.

/// What an adapter sent that must not come back out of it.
#[derive(Clone, Default)]
pub struct Secrets {
    words: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} held)", self.words.len())
    }
}

/// Where a secret shorter than this is said, it is too short to blank without
/// blanking ordinary words with it; the patterns still hide it after a scheme.
const SHORTEST: usize = 3;

/// Header names whose value is a credential, lower-case.
const HEADERS: [&str; 5] = [
    "proxy-authorization",
    "authorization",
    "x-auth-token",
    "set-cookie",
    "cookie",
];

/// Authorization schemes whose next word is a credential, lower-case.
const SCHEMES: [&str; 2] = ["bearer ", "basic "];

const BLANK: &str = "***";

/// The shortest secret blanked inside an answer that is then parsed.
const LONG_ENOUGH: usize = 8;

impl Secrets {
    pub const fn new() -> Secrets {
        Secrets { words: Vec::new() }
    }

    /// `secret`, as it is and as a JSON string holds it.
    pub fn with(mut self, secret: &str) -> Secrets {
        self.add(secret);
        self
    }

    /// A user's password, and the two as HTTP basic authentication sends them.
    pub fn with_basic(mut self, username: &str, password: &str) -> Secrets {
        self.add_basic(username, password);
        self
    }

    pub fn add_basic(&mut self, username: &str, password: &str) {
        self.add(password);
        self.add(&format!("{username}:{password}"));
        self.add(&base64(format!("{username}:{password}").as_bytes()));
    }

    pub fn add(&mut self, secret: &str) {
        if secret.len() < SHORTEST {
            return;
        }
        // A JSON string's escaping, once (a login body) and twice (an error
        // message quoting that body); a URL's percent-encoding and a form's.
        let escaped = json_escaped(secret);
        let forms = [
            json_escaped(&escaped),
            escaped,
            percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
            form_urlencoded::byte_serialize(secret.as_bytes()).collect(),
            secret.to_string(),
        ];
        for form in forms {
            if !self.words.contains(&form) {
                self.words.push(form);
            }
        }
        // Longest first, so a secret that holds another is blanked whole.
        self.words.sort_by_key(|w| std::cmp::Reverse(w.len()));
    }

    /// `text` with the known secrets blanked, only in forms that cannot reach
    /// beyond a JSON string (no quote or backslash in them): for an answer that
    /// is to be parsed after, as a successful one is.
    pub fn scrub_known_in_json(&self, text: &str) -> String {
        let mut out = text.to_string();
        // Long enough not to be a word an answer holds for itself (a token
        // `hale` would blank every `"by": "hale"`).
        let long = |w: &&String| w.len() >= LONG_ENOUGH && !w.contains(['"', '\\']);
        for word in self.words.iter().filter(long) {
            if out.contains(word.as_str()) {
                out = out.replace(word.as_str(), BLANK);
            }
        }
        out
    }

    /// `text` with every known secret blanked, and the value after every
    /// credential header name and authorization scheme.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for word in &self.words {
            if out.contains(word.as_str()) {
                out = out.replace(word.as_str(), BLANK);
            }
        }
        blank_after(
            &blank_after(&out, &HEADERS, header_value),
            &SCHEMES,
            token68,
        )
    }
}

/// `text` as the inside of a JSON string.
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).expect("a string serializes");
    quoted[1..quoted.len() - 1].to_string()
}

/// A parse error's message without the text it quotes from the answer
/// (`invalid type: string "…", expected a sequence at line 1 column 9`): an
/// answer that is not what was asked for may be a proxy's echo of the request.
pub fn unquoted(message: &str) -> String {
    // Some parsers add the answer's text around the fault on lines of its own.
    let message = message.lines().next().unwrap_or_default();
    let message = match (message.find('"'), message.rfind('"')) {
        (Some(first), Some(last)) if first < last => {
            format!("{}\"…\"{}", &message[..first], &message[last + 1..])
        }
        _ => message.to_string(),
    };
    // A name the answer gave (`unknown variant `x``), not one the schema did
    // (`missing field `labels``).
    for given in ["unknown variant `", "unknown field `"] {
        if let Some(at) = message.find(given) {
            let from = at + given.len();
            if let Some(len) = message[from..].find('`') {
                return format!("{}…{}", &message[..from], &message[from + len..]);
            }
        }
    }
    message
}

/// `text` with the value `value_len` measures after each of `names` (matched
/// in any case, at the start of a word) blanked.
fn blank_after(text: &str, names: &[&str], value_len: fn(&str) -> usize) -> String {
    let lower = text.to_ascii_lowercase();
    // Where `name` next begins a word, from `from` on.
    let next_word = |name: &str, mut from: usize| -> Option<usize> {
        while let Some(i) = lower[from..].find(name) {
            let start = from + i;
            let word_start = lower[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-' && c != '_');
            if word_start {
                return Some(start);
            }
            from = start + name.len();
        }
        None
    };
    // Each name's next place, searched again only once passed: the text is read
    // once per name, however many times they occur (an answer is the other
    // side's to make as long as it likes).
    let mut next: Vec<Option<usize>> = names.iter().map(|n| next_word(n, 0)).collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    loop {
        for (place, name) in next.iter_mut().zip(names) {
            if place.is_some_and(|p| p < at) {
                *place = next_word(name, at);
            }
        }
        let Some((start, len)) = next
            .iter()
            .zip(names)
            .filter_map(|(place, name)| Some(((*place)?, name.len())))
            .min()
        else {
            break;
        };
        let value = start + len;
        let blanked = value_len(&text[value..]);
        out.push_str(&text[at..value]);
        if blanked > 0 {
            let lead = text[value..].len() - text[value..].trim_start_matches(SEPARATORS).len();
            out.push_str(&text[value..value + lead]);
            out.push_str(BLANK);
        }
        at = value + blanked;
    }
    out.push_str(&text[at..]);
    out
}

/// What may stand between a header's name and its value: `: `, `": "`, `=`.
const SEPARATORS: &[char] = &[' ', '\t', ':', '"', '\'', '=', '\\'];

/// A header's value after its name: up to the end of the line, a `;` or `,`
/// between headers, or the quote that closes it. Nothing unless a `:`, `=` or
/// a closing quote follows the name (`the authorization failed` is prose).
fn header_value(rest: &str) -> usize {
    let value = rest.trim_start_matches(SEPARATORS);
    let lead = rest.len() - value.len();
    if !rest[..lead].contains([':', '=', '"', '\'']) {
        return 0;
    }
    let end = value
        .find(['\n', '\r', ';', ',', '"', '\'', '}', '&', '\\'])
        .unwrap_or(value.len());
    if end == 0 { 0 } else { lead + end }
}

/// A scheme's credential: one token68 word (RFC 7235).
fn token68(rest: &str) -> usize {
    rest.find(|c: char| !(c.is_ascii_alphanumeric() || "-._~+/=".contains(c)))
        .unwrap_or(rest.len())
}

/// Standard base64 with padding (RFC 4648), as basic authentication sends it.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
            (
                "admin:CANARY-bmcpass-91c2",
                "YWRtaW46Q0FOQVJZLWJtY3Bhc3MtOTFjMg==",
            ),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
    }

    #[test]
    fn known_secrets_go_in_every_form_they_travel_in() {
        let s = Secrets::new()
            .with("tok-123")
            .with_basic("admin", "pa\"ss\\word");
        for (echoed, shown) in [
            ("refused tok-123 here", "refused *** here"),
            (
                r#"body {"Password":"pa\"ss\\word","UserName":"admin"}"#,
                r#"body {"Password":"***","UserName":"admin"}"#,
            ),
            ("raw pa\"ss\\word", "raw ***"),
            (
                r#"message "{\"Password\":\"pa\\\"ss\\\\word\"}""#,
                r#"message "{\"Password\":\"***\"}""#,
            ),
            ("url pa%22ss%5Cword&x", "url ***&x"),
            ("tok-123 in a form: tok%2D123", "*** in a form: ***"),
            ("auth YWRtaW46cGEic3Ncd29yZA== seen", "auth *** seen"),
            ("nothing secret", "nothing secret"),
        ] {
            assert_eq!(s.scrub(echoed), shown, "{echoed}");
        }
    }

    #[test]
    fn credential_headers_and_schemes_are_blanked_known_or_not() {
        for (echoed, shown) in [
            (
                "received headers: accept: application/json; authorization: Bearer abc.DEF-1; host: x",
                "received headers: accept: application/json; authorization: ***; host: x",
            ),
            (
                r#"got headers {"authorization": "Basic YWRtaW46eA==", "x-auth-token": "s3ss"}"#,
                r#"got headers {"authorization": "***", "x-auth-token": "***"}"#,
            ),
            ("Authorization=Token abc", "Authorization=***"),
            (
                "the header said Bearer eyJhbGci.x.y: refused",
                "the header said Bearer ***: refused",
            ),
            ("Cookie: session=abc; Path=/", "Cookie: ***; Path=/"),
            (
                r#"body "{\"X-Auth-Token\": \"s3ss\"}""#,
                r#"body "{\"X-Auth-Token\": \"***\"}""#,
            ),
            (
                "unauthorized: the token is wrong",
                "unauthorized: the token is wrong",
            ),
            ("the authorization failed", "the authorization failed"),
            ("a basic  check", "a basic  check"),
        ] {
            assert_eq!(Secrets::new().scrub(echoed), shown, "{echoed}");
        }
    }

    #[test]
    fn a_parse_error_keeps_its_shape_not_what_it_quotes() {
        let e =
            serde_json::from_str::<Vec<u8>>(r#""authorization: Bearer \"x\" tok""#).unwrap_err();
        assert_eq!(
            unquoted(&e.to_string()),
            r#"invalid type: string "…", expected a sequence at line 1 column 33"#
        );
        assert_eq!(unquoted("missing field `labels`"), "missing field `labels`");
        assert_eq!(
            unquoted("expected `,` at line 1 column 2\n\n\t[tok-CANA\n\t.^"),
            "expected `,` at line 1 column 2"
        );
        assert_eq!(
            unquoted("unknown variant `tok-9`, expected `a` or `b` at line 1"),
            "unknown variant `…`, expected `a` or `b` at line 1"
        );
    }

    /// An answer made of the names over and over (a megabyte of them) is read
    /// once per name, not once per occurrence, and each is blanked.
    #[test]
    fn every_one_of_many_names_is_blanked() {
        let text = "bearer x ".repeat(100_000) + "authorization: tok";
        let scrubbed = Secrets::new().scrub(&text);
        assert_eq!(scrubbed.matches("bearer ***").count(), 100_000);
        assert!(scrubbed.ends_with("authorization: ***"));
    }

    #[test]
    fn short_secrets_are_not_blanked_through_ordinary_words() {
        let s = Secrets::new().with("ab");
        assert_eq!(s.scrub("a table"), "a table");
    }
}
