#!/usr/bin/python3
"""The notebooks under examples/notebooks: nbformat 4 JSON with outputs cleared,
code cells that compile, and calls only to methods the client has.
Usage: notebook_test.py REPO_ROOT"""

import glob
import json
import os
import re
import sys
import unittest

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import ringmaster  # noqa: E402


class NotebooksTest(unittest.TestCase):
    def notebooks(self):
        paths = sorted(glob.glob(os.path.join(ROOT, "examples", "notebooks", "*.ipynb")))
        self.assertTrue(paths, "no notebook under examples/notebooks")
        return paths

    def test_valid_nbformat4_cleared_and_compiling(self):
        for path in self.notebooks():
            with open(path, encoding="utf-8") as f:
                nb = json.load(f)
            self.assertEqual(nb["nbformat"], 4, path)
            self.assertIsInstance(nb["metadata"], dict)
            code = [c for c in nb["cells"] if c["cell_type"] == "code"]
            self.assertTrue(code, path)
            for i, cell in enumerate(nb["cells"]):
                self.assertIn(cell["cell_type"], ("code", "markdown", "raw"))
                src = "".join(cell["source"])
                if cell["cell_type"] != "code":
                    continue
                self.assertEqual(cell["outputs"], [], f"{path} cell {i}: outputs not cleared")
                self.assertIsNone(cell["execution_count"], f"{path} cell {i}")
                compile(src, f"{path} cell {i}", "exec")
                for method in re.findall(r"\bclient\.(\w+)", src):
                    self.assertTrue(hasattr(ringmaster.Client, method) or method in ("server", "timeout"),
                                    f"{path} cell {i}: Client has no {method}")
            try:
                import nbformat
            except ImportError:
                continue
            nbformat.validate(nbformat.reads(json.dumps(nb), as_version=4))


if __name__ == "__main__":
    unittest.main(verbosity=2)
