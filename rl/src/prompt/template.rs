//! Prompt templates with named placeholders: `{reference_code}` is replaced, `{{` and `}}` are
//! literal braces. A template is parsed once (at the server's start) and every fault is found
//! then: an unknown placeholder, a brace that opens nothing, a required placeholder left out.
//! Values are substituted without being scanned again, so code full of braces is safe.

/// The templates a deployment may override, each a file of this name in
/// `CRUCIBLE_PROMPT_TEMPLATES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TemplateName {
    /// The whole first-turn prompt.
    FirstTurn,
    /// One worked example, repeated for each example the prompt carries.
    Example,
}

impl TemplateName {
    /// Every template, in the order they are documented.
    pub const ALL: [TemplateName; 2] = [TemplateName::FirstTurn, TemplateName::Example];

    /// The file that overrides it.
    pub fn file_name(self) -> &'static str {
        match self {
            TemplateName::FirstTurn => "first_turn.txt",
            TemplateName::Example => "example.txt",
        }
    }

    /// The placeholders it may use.
    pub fn placeholders(self) -> &'static [&'static str] {
        match self {
            TemplateName::FirstTurn => {
                &["backend", "examples", "reference_code", "response_format"]
            }
            TemplateName::Example => &["number", "id", "description", "code"],
        }
    }

    /// The placeholders it must use: a first turn without the problem or without the format
    /// the reward parser reads is a mistake, not a style.
    pub fn required(self) -> &'static [&'static str] {
        match self {
            TemplateName::FirstTurn => &["examples", "reference_code", "response_format"],
            TemplateName::Example => &["code"],
        }
    }

    /// The built-in text.
    pub fn builtin(self) -> &'static str {
        match self {
            TemplateName::FirstTurn => include_str!("first_turn.txt"),
            TemplateName::Example => include_str!("example.txt"),
        }
    }
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{name}` where `name` is not one the template may use.
    #[error("{file} line {line}: unknown placeholder {{{name}}} (known: {known})")]
    UnknownPlaceholder {
        /// The template's file name.
        file: &'static str,
        /// Line of the placeholder, from 1.
        line: usize,
        /// The name used.
        name: String,
        /// The names it may use, comma-separated.
        known: String,
    },
    /// A `{` or `}` that is neither a placeholder nor doubled.
    #[error("{file} line {line}: stray '{brace}' (write {brace}{brace} for a literal brace)")]
    StrayBrace {
        /// The template's file name.
        file: &'static str,
        /// Line of the brace, from 1.
        line: usize,
        /// The brace.
        brace: char,
    },
    /// A required placeholder that does not appear.
    #[error("{file}: the placeholder {{{name}}} is required")]
    Missing {
        /// The template's file name.
        file: &'static str,
        /// The placeholder left out.
        name: &'static str,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Text(String),
    Placeholder(&'static str),
}

/// A parsed, validated template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    segments: Vec<Segment>,
}

impl Template {
    /// Parses `text` as template `name`, refusing any fault.
    pub fn parse(name: TemplateName, text: &str) -> Result<Self, TemplateError> {
        let file = name.file_name();
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut line = 1;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut word = String::new();
                    while let Some(&n) = chars.peek() {
                        if n.is_ascii_alphanumeric() || n == '_' {
                            word.push(n);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    if word.is_empty() || chars.next() != Some('}') {
                        return Err(TemplateError::StrayBrace {
                            file,
                            line,
                            brace: '{',
                        });
                    }
                    let Some(known) = name.placeholders().iter().find(|p| **p == word) else {
                        return Err(TemplateError::UnknownPlaceholder {
                            file,
                            line,
                            name: word,
                            known: name.placeholders().join(", "),
                        });
                    };
                    segments.push(Segment::Text(std::mem::take(&mut literal)));
                    segments.push(Segment::Placeholder(known));
                }
                '}' => {
                    return Err(TemplateError::StrayBrace {
                        file,
                        line,
                        brace: '}',
                    });
                }
                _ => {
                    if c == '\n' {
                        line += 1;
                    }
                    literal.push(c);
                }
            }
        }
        segments.push(Segment::Text(literal));
        for required in name.required() {
            if !segments.contains(&Segment::Placeholder(required)) {
                return Err(TemplateError::Missing {
                    file,
                    name: required,
                });
            }
        }
        Ok(Self { segments })
    }

    /// The text with each placeholder replaced by `value(name)`.
    pub fn render(&self, value: impl Fn(&str) -> String) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(t) => out.push_str(t),
                Segment::Placeholder(name) => out.push_str(&value(name)),
            }
        }
        out
    }
}

/// Every template a prompt is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Templates {
    /// `first_turn.txt`.
    pub first_turn: Template,
    /// `example.txt`.
    pub example: Template,
}

impl Default for Templates {
    fn default() -> Self {
        Self::with_overrides(|_| None).expect("the built-in templates are valid")
    }
}

impl Templates {
    /// The built-in templates, each replaced by `text(name)` where it returns one.
    pub fn with_overrides(
        text: impl Fn(TemplateName) -> Option<String>,
    ) -> Result<Self, TemplateError> {
        let load = |name: TemplateName| match text(name) {
            Some(t) => Template::parse(name, &t),
            None => Template::parse(name, name.builtin()),
        };
        Ok(Self {
            first_turn: load(TemplateName::FirstTurn)?,
            example: load(TemplateName::Example)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_and_doubled_braces_kept() {
        let t = Template::parse(TemplateName::Example, "{{n}} {number}: {code}").unwrap();
        let out = t.render(|name| match name {
            "number" => "2".into(),
            "code" => "x = {y}".into(),
            _ => unreachable!(),
        });
        assert_eq!(out, "{n} 2: x = {y}");
    }

    #[test]
    fn faults_are_named_with_their_line() {
        let err = Template::parse(TemplateName::Example, "a\n{code} {nmber}").unwrap_err();
        assert!(
            matches!(&err, TemplateError::UnknownPlaceholder { line: 2, name, .. } if name == "nmber"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("known: number, id, description, code")
        );
        let err = Template::parse(TemplateName::Example, "{code} {").unwrap_err();
        assert!(matches!(err, TemplateError::StrayBrace { brace: '{', .. }));
        let err = Template::parse(TemplateName::Example, "{code} }").unwrap_err();
        assert!(matches!(err, TemplateError::StrayBrace { brace: '}', .. }));
        let err =
            Template::parse(TemplateName::FirstTurn, "{examples}{reference_code}").unwrap_err();
        assert_eq!(
            err,
            TemplateError::Missing {
                file: "first_turn.txt",
                name: "response_format"
            }
        );
    }

    #[test]
    fn the_builtins_parse_and_overrides_replace_them() {
        let builtin = Templates::default();
        let custom = Templates::with_overrides(|name| {
            (name == TemplateName::Example).then(|| "E {code}".to_string())
        })
        .unwrap();
        assert_eq!(custom.first_turn, builtin.first_turn);
        assert_ne!(custom.example, builtin.example);
    }
}
