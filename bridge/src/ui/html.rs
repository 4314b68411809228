//! Writing HTML safely: every piece of text that came from outside (alert labels
//! and messages, node ids, a member's answers) goes through [`esc`] or one of the
//! URL encoders, and the page is assembled from those.

/// `text` made safe inside an element or a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // A browser reads NUL as the replacement character anyway; a page
            // holding it raw is binary to `grep` and `curl | less`.
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// One path segment, percent-encoded (see [`crate::path_segment`]).
pub fn segment(text: &str) -> String {
    crate::path_segment(text)
}

/// A query string from pairs, each encoded; pairs with an empty value are left out.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        q.append_pair(k, v);
    }
    let q = q.finish();
    if q.is_empty() { q } else { format!("?{q}") }
}

/// The UI's page of node `id` (of `cluster`, when not this hale's).
pub fn node_href(id: &str, cluster: Option<&str>) -> String {
    format!(
        "/ui/nodes/{}{}",
        segment(id),
        query(&[("cluster", cluster.unwrap_or(""))])
    )
}

/// A time as the UI shows it: UTC to the second, or `—`.
pub fn when(t: Option<crate::core::Time>) -> String {
    t.map_or_else(
        || "—".into(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// A score, or `—` for none.
pub fn score(s: Option<u8>) -> String {
    s.map_or_else(|| "—".into(), |s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_alerts_cannot_become_markup() {
        for (text, safe) in [
            (
                "<script>alert(1)</script>",
                "&lt;script&gt;alert(1)&lt;/script&gt;",
            ),
            ("\" onmouseover=\"x", "&quot; onmouseover=&quot;x"),
            ("it's a & b", "it&#39;s a &amp; b"),
            ("plain", "plain"),
            ("a\0b", "a\u{FFFD}b"),
        ] {
            assert_eq!(esc(text), safe);
        }
    }

    #[test]
    fn node_ids_stay_one_segment() {
        assert_eq!(segment("10.0.0.42:9100/x"), "10.0.0.42%3A9100%2Fx");
        assert_eq!(segment("a b?#"), "a%20b%3F%23");
        assert_eq!(
            (segment("."), segment("..")),
            ("%2E".into(), "%2E%2E".into())
        );
        assert_eq!(segment("a..b"), "a..b");
        assert_eq!(
            node_href("gpu/1", Some("east")),
            "/ui/nodes/gpu%2F1?cluster=east"
        );
        assert_eq!(node_href("n1", None), "/ui/nodes/n1");
        assert_eq!(query(&[("q", "a&b=c"), ("health", "")]), "?q=a%26b%3Dc");
    }
}
