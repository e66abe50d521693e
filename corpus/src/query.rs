//! What a problem is searched by: the torch operators its `Model` calls (`torch.softmax`,
//! `F.gelu`, `nn.Conv2d`, `x.sum(...)`, `@`), weighted above the other words of the class
//! (its docstring, attribute names). Only the `Model` class is read: `get_inputs` calls
//! `torch.randn` in every problem and says nothing about the operator.

/// Roots whose attributes are operators.
const OP_ROOTS: [&str; 4] = ["torch", "F", "nn", "functional"];
/// Attributes of those roots that build tensors or modules rather than compute.
const NOT_OPS: [&str; 16] = [
    "Module",
    "Parameter",
    "Tensor",
    "functional",
    "nn",
    "randn",
    "rand",
    "zeros",
    "ones",
    "empty",
    "tensor",
    "float32",
    "float16",
    "bfloat16",
    "device",
    "no_grad",
];

/// Operator classes: what kind of kernel an operator needs. A problem and an example share a
/// class when their operators differ (GELU and Tanh: both elementwise), which BM25 over names
/// alone cannot see. Names are the last part of an operator, lowercased. In order of
/// precedence: the first class a problem's operators fall in is its kind (a linear layer with
/// a ReLU is a matmul kernel with an epilogue; an L1 norm is a reduction, not an elementwise
/// kernel).
const OP_CLASSES: [(&str, &[&str]); 7] = [
    (
        "matmul",
        &[
            "matmul",
            "mm",
            "bmm",
            "addmm",
            "linear",
            "einsum",
            "baddbmm",
            "matrix_multiplication",
        ],
    ),
    (
        "convolution",
        &[
            "conv1d",
            "conv2d",
            "conv3d",
            "convtranspose1d",
            "convtranspose2d",
            "convtranspose3d",
            "conv_transpose2d",
        ],
    ),
    (
        "normalization",
        &[
            "batchnorm1d",
            "batchnorm2d",
            "batchnorm3d",
            "layernorm",
            "layer_norm",
            "groupnorm",
            "group_norm",
            "instancenorm2d",
            "rmsnorm",
            "batch_norm",
        ],
    ),
    (
        "pooling",
        &[
            "maxpool1d",
            "maxpool2d",
            "maxpool3d",
            "avgpool1d",
            "avgpool2d",
            "avgpool3d",
        ],
    ),
    (
        "softmax",
        &["softmax", "log_softmax", "logsoftmax", "softmin"],
    ),
    (
        "reduction",
        &[
            "sum",
            "mean",
            "max",
            "min",
            "amax",
            "amin",
            "argmax",
            "argmin",
            "prod",
            "norm",
            "var",
            "std",
            "cumsum",
            "cumprod",
            "logsumexp",
        ],
    ),
    (
        "elementwise",
        &[
            "relu",
            "relu6",
            "leaky_relu",
            "leakyrelu",
            "gelu",
            "sigmoid",
            "tanh",
            "silu",
            "swish",
            "elu",
            "selu",
            "celu",
            "softplus",
            "softsign",
            "hardtanh",
            "hardsigmoid",
            "hardswish",
            "mish",
            "abs",
            "exp",
            "log",
            "sqrt",
            "rsqrt",
            "pow",
            "clamp",
            "add",
            "mul",
            "sub",
            "div",
            "neg",
            "erf",
            "sin",
            "cos",
            "where",
            "maximum",
            "minimum",
        ],
    ),
];

/// Words of a `Model` class that every problem has (Python, torch, docstring boilerplate):
/// left out of the query, where their many matches in long code would outweigh an operator.
const BOILERPLATE: [&str; 40] = [
    "self", "def", "return", "class", "model", "module", "nn", "torch", "tensor", "super", "init",
    "forward", "x", "args", "returns", "input", "output", "shape", "of", "the", "a", "an", "to",
    "with", "and", "as", "same", "applies", "applied", "simple", "that", "performs", "int",
    "float", "float32", "none", "is", "in", "on", "for",
];

/// The class of an operator word (`gelu` is elementwise), if it has one.
pub fn op_class(op_word: &str) -> Option<&'static str> {
    let word = op_word.to_ascii_lowercase();
    OP_CLASSES
        .iter()
        .find(|(_, ops)| ops.contains(&word.as_str()))
        .map(|(class, _)| *class)
}

/// Whether a lowercased token of a `Model` class is boilerplate every problem shares.
pub fn is_boilerplate(token: &str) -> bool {
    BOILERPLATE.contains(&token) || token.bytes().all(|b| b.is_ascii_digit())
}

/// A problem's search: its operators and the rest of its `Model` source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProblemQuery {
    /// The operators, as written (`torch.softmax`, `nn.Linear`, `Tensor.sum`, `@`), each once,
    /// in order of appearance.
    pub ops: Vec<String>,
    /// The `Model` class's source (the whole reference when it has no `class Model`).
    pub text: String,
}

impl ProblemQuery {
    /// The query of a reference source.
    pub fn from_reference(reference_code: &str) -> Self {
        let text = model_source(reference_code);
        Self {
            ops: torch_ops(&text),
            text,
        }
    }

    /// The words each operator is searched by: its last name (`softmax` of
    /// `torch.softmax`), `matmul` for `@`.
    pub fn op_words(&self) -> Vec<String> {
        let mut words: Vec<String> = Vec::new();
        for op in &self.ops {
            let word = if op == "@" {
                "matmul"
            } else {
                op.rsplit('.').next().unwrap_or(op)
            };
            if !words.iter().any(|w| w == word) {
                words.push(word.to_string());
            }
        }
        words
    }

    /// Its kind: the class of highest precedence among its operators' classes.
    pub fn kind(&self) -> Option<&'static str> {
        let classes = self.class_words();
        OP_CLASSES
            .iter()
            .map(|(class, _)| *class)
            .find(|class| classes.contains(class))
    }

    /// The classes of its operators, each once.
    pub fn class_words(&self) -> Vec<&'static str> {
        let mut classes = Vec::new();
        for class in self.op_words().iter().filter_map(|w| op_class(w)) {
            if !classes.contains(&class) {
                classes.push(class);
            }
        }
        classes
    }
}

/// The source of `class Model` (its header and indented body), or all of `code` without one.
fn model_source(code: &str) -> String {
    let mut lines = code.lines();
    let Some(header) = lines.by_ref().find(|l| {
        l.strip_prefix("class Model")
            .is_some_and(|rest| rest.starts_with('(') || rest.starts_with(':'))
    }) else {
        return code.to_string();
    };
    let mut out = vec![header];
    for line in lines {
        let top_level = !line.is_empty() && !line.starts_with(char::is_whitespace);
        if top_level && !line.starts_with('#') && !line.starts_with(')') {
            break;
        }
        out.push(line);
    }
    out.join("\n")
}

/// The torch operators `code` calls, each once, in order of appearance: attributes of
/// `torch`, `F`, `nn` (tensor and module constructors left out), tensor methods called on
/// a name (`x.sum(` is `Tensor.sum`) and the matrix product operator `@`.
pub fn torch_ops(code: &str) -> Vec<String> {
    let mut ops: Vec<String> = Vec::new();
    let mut push = |op: String| {
        if !ops.contains(&op) {
            ops.push(op);
        }
    };
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'#' {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'@'
            && bytes
                .get(i + 1)
                .is_some_and(|n| n.is_ascii_whitespace() || *n == b'(')
        {
            let after_name = i > 0
                && code[..i]
                    .trim_end()
                    .ends_with(|p: char| p.is_alphanumeric() || p == ')' || p == ']' || p == '_');
            if after_name {
                push("@".into());
            }
            i += 1;
            continue;
        }
        let starts_ident = c.is_ascii_alphabetic() || c == b'_';
        let prev = |back: usize| i.checked_sub(back).map(|j| bytes[j]);
        // `f(x).mean()`: a method of the call's result.
        let on_result = prev(1) == Some(b'.') && matches!(prev(2), Some(b')' | b']'));
        let after_ident =
            prev(1).is_some_and(|p| p.is_ascii_alphanumeric() || p == b'_' || p == b'.');
        if starts_ident && on_result {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            if bytes.get(i) == Some(&b'(') && !code[start..i].starts_with("__") {
                push(format!("Tensor.{}", &code[start..i]));
            }
            continue;
        }
        if !starts_ident || after_ident {
            i += 1;
            continue;
        }
        // An identifier chain `a.b.c`.
        let start = i;
        while i < bytes.len()
            && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.')
        {
            i += 1;
        }
        let chain = code[start..i].trim_end_matches('.');
        let parts: Vec<&str> = chain.split('.').collect();
        let [root, .., last] = parts.as_slice() else {
            continue;
        };
        let called = bytes.get(i) == Some(&b'(');
        if OP_ROOTS.contains(root) {
            if !NOT_OPS.contains(last) && !OP_ROOTS.contains(last) {
                push(chain.to_string());
            }
        } else if called
            && *root != "self"
            && *root != "super"
            && !last.starts_with("__")
            && parts.len() == 2
        {
            push(format!("Tensor.{last}"));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    const FUSED: &str = r#""""A fused problem."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv, then GELU and a softmax; a sum."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3)
        self.scale = nn.Parameter(torch.randn(c))

    def forward(self, x, w):
        x = self.conv(x)  # torch.relu is not called
        x = F.gelu(x) @ w
        x = torch.nn.functional.softmax(x, dim=1)
        return x.sum(dim=1) + torch.matmul(x, w).mean()


def get_inputs():
    return [torch.randn(2, 3)]
"#;

    #[test]
    fn the_models_operators_are_extracted_and_nothing_else() {
        let q = ProblemQuery::from_reference(FUSED);
        assert_eq!(
            q.ops,
            [
                "nn.Conv2d",
                "F.gelu",
                "@",
                "torch.nn.functional.softmax",
                "Tensor.sum",
                "torch.matmul",
                "Tensor.mean"
            ]
        );
        assert_eq!(
            q.op_words(),
            ["Conv2d", "gelu", "matmul", "softmax", "sum", "mean"]
        );
        assert!(q.text.contains("Conv, then GELU") && !q.text.contains("get_inputs"));
        assert_eq!(
            q.class_words(),
            [
                "convolution",
                "elementwise",
                "matmul",
                "softmax",
                "reduction"
            ]
        );
        assert_eq!(q.kind(), Some("matmul"));
        assert_eq!(
            ProblemQuery::from_reference("y = x / torch.sum(torch.abs(x), dim=1)").kind(),
            Some("reduction")
        );
        assert_eq!(
            ProblemQuery::from_reference("y = torch.relu(x)").kind(),
            Some("elementwise")
        );
        assert_eq!(ProblemQuery::from_reference("y = x").kind(), None);
        assert!(is_boilerplate("self") && is_boilerplate("1") && !is_boilerplate("gelu"));
    }

    #[test]
    fn a_source_without_a_model_class_is_searched_whole() {
        let q = ProblemQuery::from_reference("y = torch.tanh(x)\n");
        assert_eq!(q.ops, ["torch.tanh"]);
        assert_eq!(q.text, "y = torch.tanh(x)\n");
    }
}
