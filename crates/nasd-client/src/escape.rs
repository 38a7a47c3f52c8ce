//! Showing untrusted text on a terminal. Names and details that come from the manager were
//! chosen by other users (or by whoever controls the manager's database), so printed raw they
//! could move the cursor, recolour the screen, or add a line that looks like another file in
//! `ls -l`. [`shown`] prints such text the way GNU `ls` does with its shell-escape quoting:
//! unchanged when every character is harmless, else inside `$'...'` with C escapes (`\n`,
//! `\r`, `\t`, `\e`, `\xHH`, `\uHHHH`), which a shell reads back as the original name.
//! JSON output needs none of this: serde escapes control characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` could change what a terminal shows beyond printing one visible glyph: C0 and C1
/// controls and DEL, line and paragraph separators, and the invisible format characters that
/// reorder or hide text (bidirectional overrides and isolates, zero-width characters, the
/// byte order mark, interlinear annotation marks).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// `s` as it is safe to print: itself when harmless, else `$'...'`-quoted with escapes. Text
/// that itself starts with `$'` is quoted too, so a quoted name can never be forged by a
/// harmless one.
pub fn shown(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) && !s.starts_with("$'") {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str("$'");
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x1b' => out.push_str("\\e"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if (c as u32) < 0x80 && is_unsafe(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harmless_names_print_unchanged() {
        for n in [
            "notes.txt",
            "a b",
            "ünïcödé 日本",
            "it's",
            "back\\slash",
            "$HOME",
        ] {
            assert_eq!(shown(n), n);
        }
    }

    #[test]
    fn controls_and_invisible_characters_are_escaped() {
        assert_eq!(shown("a\nb"), "$'a\\nb'");
        assert_eq!(shown("x\r\x1b[31m"), "$'x\\r\\e[31m'");
        assert_eq!(shown("\x07\x7f\u{85}"), "$'\\x07\\x7f\\u0085'");
        assert_eq!(shown("evil\u{202E}txt.exe"), "$'evil\\u202etxt.exe'");
        assert_eq!(shown("it's\n"), "$'it\\'s\\n'");
        assert_eq!(shown("a\\n\tb"), "$'a\\\\n\\tb'");
        assert_eq!(shown("$'a\\nb'"), "$'$\\'a\\\\nb\\''");
    }

    #[test]
    fn escaped_text_never_holds_a_control_character() {
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let s = format!("a{c}b");
            let out = shown(&s);
            assert!(!out.chars().any(is_unsafe), "{c:?} -> {out:?}");
        }
    }
}
