#!/usr/bin/env python3
"""Unit tests of scripts/check_layout.py on small crates written to a temporary directory:
a forbidden `crate::` import between layers is caught and named, so is a top-level module with
no rule, while comments, in-file tests, tests.rs files and a module's own paths are not; and an
import circle is still found.
Run: python3 scripts/test_check_layout.py (scripts/test.sh does). Standard library only."""
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layout as c  # noqa: E402

RULES = {"low": set(), "high": {"low"}}


class LayoutTest(unittest.TestCase):
    def setUp(self):
        self.cwd = os.getcwd()
        self.tmp = tempfile.TemporaryDirectory()
        os.chdir(self.tmp.name)

    def tearDown(self):
        os.chdir(self.cwd)
        self.tmp.cleanup()

    def write(self, files):
        for rel, text in files.items():
            p = Path("w/src") / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)

    def test_an_upward_import_is_caught_with_the_file_and_the_path(self):
        self.write({
            "lib.rs": "pub mod low;\npub mod high;\n",
            "low/mod.rs": "pub mod a;\n",
            "low/a.rs": "use crate::high::b::Thing;\npub struct A;\n",
            "high/mod.rs": "pub mod b;\n",
            "high/b.rs": "use crate::low::a::A;\npub struct Thing;\n",
        })
        found = c.forbidden_imports("w", RULES)
        self.assertEqual(len(found), 1, found)
        self.assertIn("w/src/low/a.rs: imports crate::high::b::Thing", found[0])
        self.assertIn("low/ may import only: nothing else of the crate", found[0])

    def test_comments_tests_and_own_paths_do_not_count(self):
        self.write({
            "lib.rs": "pub mod low;\npub mod high;\n",
            "low/mod.rs": "pub mod a;\n// see crate::high::b\n",
            "low/a.rs": "use crate::low::A2;\n#[cfg(test)]\nmod tests {\n    use crate::high::b;\n}\n",
            "low/a/tests.rs": "use crate::high::b::Thing;\n",
            "high/mod.rs": "pub mod b;\n",
            "high/b.rs": "use crate::low::a;\n",
        })
        self.assertEqual(c.forbidden_imports("w", RULES), [])

    def test_a_top_level_module_without_a_rule_is_an_error(self):
        self.write({"lib.rs": "pub mod low;\npub mod stray;\n", "low/mod.rs": "", "stray.rs": ""})
        found = c.forbidden_imports("w", RULES)
        self.assertEqual(len(found), 1, found)
        self.assertIn("w/src/stray: top-level module missing from MAY_IMPORT['w']", found[0])

    def test_an_import_circle_is_still_found(self):
        self.write({
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        })
        self.assertEqual(c.import_cycles("w"), [["w/src/a.rs", "w/src/b.rs"]])


if __name__ == "__main__":
    unittest.main()
