#!/usr/bin/env python3
"""Unit tests of scripts/check_doc_examples.py's pure parts (block extraction, marker parsing,
the port rewrite, the summary) and of its runner on blocks that need no server, a deliberately
broken one among them, so the check is shown to fail.
Run: python3 scripts/test_doc_examples.py (scripts/test.sh does). Standard library only."""
import io
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_doc_examples as c  # noqa: E402

DOC = """# A doc

```bash
echo not marked
```

<!-- example: run -->
```bash
curl -s localhost:10907/health
```

<!-- example: run, needs=openenv+verifiers, given=client kernel, timeout=30 -->
```python
print(client)
```

- in a list:

  <!-- example: run -->
  ```sh
  echo indented
  ```

<!-- example: other -->
````python
```
not a fence's end
````
"""


class Extract(unittest.TestCase):
    def test_only_marked_blocks_with_their_lines_and_options(self):
        blocks = c.extract(DOC, "doc.md")
        self.assertEqual([(b.line, b.lang) for b in blocks], [(8, "bash"), (13, "python"),
                                                             (20, "bash")])
        self.assertEqual(blocks[0].source, "curl -s localhost:10907/health\n")
        self.assertEqual(blocks[0].timeout_s, c.DEFAULT_TIMEOUT_S)
        self.assertEqual(blocks[1].needs, ["openenv", "verifiers"])
        self.assertEqual(blocks[1].given, ["client", "kernel"])
        self.assertEqual(blocks[1].timeout_s, 30.0)
        self.assertEqual(blocks[1].where, "doc.md:13")

    def test_an_indented_fence_loses_its_indent(self):
        self.assertEqual(c.extract(DOC, "doc.md")[2].source, "echo indented\n")

    def test_a_longer_fence_holds_a_shorter_one(self):
        text = "<!-- example: run -->\n````python\n```\nx = 1\n````\n"
        self.assertEqual(c.extract(text, "d.md")[0].source, "```\nx = 1\n")

    def test_a_marker_away_from_a_fence_is_an_error(self):
        with self.assertRaisesRegex(c.MarkerError, r"d\.md:1: .*no fence"):
            c.extract("<!-- example: run -->\n\n```bash\necho\n```\n", "d.md")
        with self.assertRaisesRegex(c.MarkerError, r"d\.md:2: .*no fence"):
            c.extract("text\n<!-- example: run -->\n", "d.md")

    def test_a_marked_block_of_another_language_is_an_error(self):
        with self.assertRaisesRegex(c.MarkerError, "not json"):
            c.extract("<!-- example: run -->\n```json\n{}\n```\n", "d.md")
        with self.assertRaisesRegex(c.MarkerError, "not unlabelled"):
            c.extract("<!-- example: run -->\n```\nx\n```\n", "d.md")

    def test_the_doc_files_are_the_readmes_the_docs_and_the_trainer_pages(self):
        with tempfile.TemporaryDirectory() as repo:
            for rel in ["README.md", "docs/B.md", "docs/A.md", "docs/notes.txt",
                        "docs/trainers/verl.md", "docs/trainers/trl.md",
                        "docs/gpu-runs/run/README.md"]:
                os.makedirs(os.path.dirname(os.path.join(repo, rel)), exist_ok=True)
                open(os.path.join(repo, rel), "w").close()
            # clients/python/README.md is absent here: left out, not an error.
            self.assertEqual(c.doc_files(repo), ["README.md", "docs/A.md", "docs/B.md",
                                                 "docs/trainers/trl.md", "docs/trainers/verl.md"])

    def test_every_trainer_page_runs_a_snippet_and_is_in_the_index(self):
        # One page per trainer (docs/TRAINERS.md is their index), each with a snippet the
        # --needs-only pass runs in the trainers' venv.
        pages = sorted(n for n in c.doc_files(c.REPO) if n.startswith("docs/trainers/"))
        self.assertGreaterEqual(len(pages), 8)
        with open(os.path.join(c.REPO, "docs", "TRAINERS.md")) as f:
            index = f.read()
        for name in pages:
            with open(os.path.join(c.REPO, name)) as f:
                blocks = c.extract(f.read(), name)
            self.assertTrue(any(b.needs for b in blocks), f"{name}: no runnable needs= snippet")
            self.assertIn(f"(trainers/{os.path.basename(name)})", index, name)

    def test_the_repository_docs_parse(self):
        # Every marker in the real docs is well formed (the checker would refuse to start).
        for name in c.doc_files(c.REPO):
            with open(os.path.join(c.REPO, name)) as f:
                c.extract(f.read(), name)


class Marker(unittest.TestCase):
    def test_options(self):
        self.assertIsNone(c.parse_marker("skip"))
        self.assertEqual(c.parse_marker("run"),
                         {"needs": [], "given": [], "timeout_s": c.DEFAULT_TIMEOUT_S})
        self.assertEqual(c.parse_marker("run , timeout=5 , given=url")["given"], ["url"])

    def test_refused(self):
        for body, why in [("run, needz=x", "unknown option"), ("run, needs", "key=value"),
                          ("run, timeout=soon", "not a number"),
                          ("run, given=client spaceship", "without a fixture: spaceship")]:
            with self.assertRaisesRegex(c.MarkerError, why):
                c.parse_marker(body)


class Port(unittest.TestCase):
    def test_loopback_urls_only(self):
        src = ("curl localhost:10907/x 'http://127.0.0.1:10907/openenv'\n"
               "CRUCIBLE_URL=http://queue:10907 # a remote host stays; so do 109070 and :10908\n"
               "x=localhost:109070 y=127.0.0.1:10908\n")
        self.assertEqual(c.rewrite_port(src, 4321),
                         "curl localhost:4321/x 'http://127.0.0.1:4321/openenv'\n"
                         "CRUCIBLE_URL=http://queue:10907 # a remote host stays; so do 109070 and"
                         " :10908\nx=localhost:109070 y=127.0.0.1:10908\n")


def block(lang, source, **kw):
    return c.Block("doc.md", 7, lang, source, **kw)


class Run(unittest.TestCase):
    env = dict(os.environ, PYTHONPATH="")

    def test_a_passing_bash_block_uses_the_servers_port(self):
        o = c.run_block(block("bash", 'test "$(echo localhost:10907)" = localhost:5555\n'),
                        self.env, 5555)
        self.assertEqual(o.status, "ran", o.detail)

    def test_a_broken_bash_block_fails_with_its_output(self):
        # -e: the failing command stops the block even though a later one would succeed.
        o = c.run_block(block("bash", "echo before\nfalse\necho after\n"), self.env, 1)
        self.assertEqual(o.status, "FAILED")
        self.assertIn("exit status 1", o.detail)
        self.assertIn("before", o.detail)
        self.assertNotIn("after", o.detail)

    def test_pipefail_and_unset_variables(self):
        for src in ["false | cat\n", "echo $NOT_SET_ANYWHERE\n"]:
            self.assertEqual(c.run_block(block("bash", src), self.env, 1).status, "FAILED", src)

    def test_a_block_past_its_deadline_is_killed(self):
        o = c.run_block(block("bash", "sleep 30\n", timeout_s=0.5), self.env, 1)
        self.assertEqual(o.status, "FAILED")
        self.assertIn("past its deadline", o.detail)
        self.assertLess(o.seconds, 10)

    def test_a_broken_python_block_names_the_docs_line(self):
        o = c.run_block(block("python", "x = 1\nraise SystemExit(x + undefined)\n"), self.env, 1)
        self.assertEqual(o.status, "FAILED")
        self.assertIn('File "doc.md", line 9', o.detail)  # the fence is line 7, so 8, 9
        self.assertIn("NameError", o.detail)

    def test_a_python_block_gets_its_given_names(self):
        o = c.run_block(block("python", "assert num_epochs == 1 and turn_rewards\n",
                              given=["num_epochs", "turn_rewards"]), self.env, 1)
        self.assertEqual(o.status, "ran", o.detail)

    def test_a_block_needing_an_absent_module_is_skipped(self):
        o = c.run_block(block("python", "raise SystemExit(1)\n",
                              needs=["json", "no_such_module_here"]), self.env, 1)
        self.assertEqual(o.status, "skipped")
        self.assertIn("needs no_such_module_here", o.detail)

    def test_the_summary(self):
        b = block("bash", "")
        for statuses, line, rc in [
            (["ran", "ran"], "2 passed, 0 failed\n", 0),
            (["ran", "FAILED", "skipped"], "1 passed, 1 failed, 1 skipped\n", 1),
        ]:
            out = io.StringIO()
            self.assertEqual(c.report([c.Outcome(b, s) for s in statuses], out), rc)
            self.assertEqual(out.getvalue(), line)


if __name__ == "__main__":
    unittest.main(verbosity=1)
