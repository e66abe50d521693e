use super::*;

fn entry(id: &str, backend: Backend, code: &str, problem_hash: Option<&str>) -> CorpusEntry {
    CorpusEntry {
        id: id.into(),
        backend,
        description: format!("solves {id}"),
        code: code.into(),
        problem_hash: problem_hash.map(str::to_string),
    }
}

fn hash(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn corpus() -> Vec<CorpusEntry> {
    vec![
        entry(
            "softmax-a",
            Backend::Triton,
            "row max, exp, sum: softmax kernel",
            Some(&hash('a')),
        ),
        entry(
            "softmax-b",
            Backend::Triton,
            "online softmax over chunks",
            Some(&hash('b')),
        ),
        entry("relu", Backend::Triton, "tl.maximum(v, 0): relu", None),
        entry("softmax-cuda", Backend::Cuda, "__global__ softmax", None),
    ]
}

fn ids(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.entry.id.as_str()).collect()
}

#[test]
fn search_ranks_by_operator_keeps_to_the_backend_and_leaves_out_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("index");
    let summary = build_index(&corpus(), &out, false).unwrap();
    assert_eq!((summary.entries, summary.triton, summary.cuda), (4, 3, 1));
    let c = Corpus::open(&out).unwrap();
    let q = ProblemQuery::from_reference(
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, 1)\n",
    );
    let all = c.search(&q, Backend::Triton, 5, None).unwrap();
    assert_eq!(
        all.len(),
        2,
        "only entries that match a word: {:?}",
        ids(&all)
    );
    assert!(ids(&all).iter().all(|id| id.starts_with("softmax-")));
    let a = all.iter().find(|h| h.entry.id == "softmax-a").unwrap();
    assert_eq!(a.entry, corpus()[0], "stored whole");
    assert!(all[0].score >= all[1].score, "best first");
    let without_a = c.search(&q, Backend::Triton, 5, Some(&hash('a'))).unwrap();
    assert_eq!(ids(&without_a), ["softmax-b"]);
    let cuda = c.search(&q, Backend::Cuda, 5, None).unwrap();
    assert_eq!(ids(&cuda), ["softmax-cuda"]);
    assert_eq!(c.search(&q, Backend::Triton, 1, None).unwrap().len(), 1);
}

#[test]
fn an_existing_directory_is_kept_unless_replaced_and_other_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("index");
    build_index(&corpus()[..1], &out, false).unwrap();
    assert!(matches!(
        build_index(&corpus(), &out, false),
        Err(CorpusError::Exists(_))
    ));
    assert_eq!(Corpus::open(&out).unwrap().summary().entries, 1);
    build_index(&corpus(), &out, true).unwrap();
    assert_eq!(Corpus::open(&out).unwrap().summary().entries, 4);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no partial directory is left behind");

    let err = Corpus::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("is not a kernel corpus index"), "{err}");
    std::fs::write(
        out.join(MANIFEST),
        "{\"format\":99,\"entries\":1,\"triton\":1,\"cuda\":0}",
    )
    .unwrap();
    let err = Corpus::open(&out).unwrap_err().to_string();
    assert!(err.contains("format 99"), "{err}");
}

#[test]
fn an_entry_of_the_problems_kind_ranks_above_one_that_shares_an_operator_only() {
    let model = |body: &str| {
        format!("class Model(nn.Module):\n    def forward(self, x):\n        return {body}\n")
    };
    let mut l1 = entry("l1norm", Backend::Triton, "abs, row sum, divide", None);
    l1.description = model("x / torch.sum(torch.abs(x), dim=1, keepdim=True)");
    let mut tanh = entry("tanh", Backend::Triton, "one load, tanh, one store", None);
    tanh.description = model("torch.tanh(x)");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("index");
    build_index(&[l1, tanh], &out, false).unwrap();
    let c = Corpus::open(&out).unwrap();
    let softsign = ProblemQuery::from_reference(&model("x / (1 + torch.abs(x))"));
    assert_eq!(softsign.kind(), Some("elementwise"));
    let hits = c.search(&softsign, Backend::Triton, 2, None).unwrap();
    assert_eq!(ids(&hits), ["tanh", "l1norm"]);
}
