# SPDX-License-Identifier: Apache-2.0
"""The package's licence as its own build backend (backend/gpuos_backend.py) writes it: METADATA and
PKG-INFO declare Apache-2.0 (PEP 639: License-Expression, License-File, core metadata 2.4), the wheel
holds LICENSE in .dist-info/licenses/ and the sdist at its root, and python/LICENSE is the repository's
LICENSE. No library, GPU or pip needed (ctest kv.python runs these with the others).
"""

import email.parser
import importlib.util
import os
import sys
import tarfile
import tempfile
import unittest
import zipfile

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_LICENSE = os.path.join(os.path.dirname(PACKAGE_ROOT), "LICENSE")


def load_backend():
    spec = importlib.util.spec_from_file_location("gpuos_backend_under_test",
                                                  os.path.join(PACKAGE_ROOT, "backend", "gpuos_backend.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path):
    with open(path, "rb") as f:
        return f.read()


class LicenceTest(unittest.TestCase):
    def setUp(self):
        self.backend = load_backend()
        self.out = tempfile.TemporaryDirectory(prefix="gpuos-python-licence.")
        self.addCleanup(self.out.cleanup)
        self.license = read(os.path.join(PACKAGE_ROOT, "LICENSE"))

    def check_metadata(self, text):
        headers = email.parser.Parser().parsestr(text, headersonly=True)
        self.assertEqual(headers["Metadata-Version"], "2.4")
        self.assertEqual(headers["License-Expression"], "Apache-2.0")
        self.assertEqual(headers.get_all("License-File"), ["LICENSE"])
        # PEP 639: with an expression, neither the deprecated License field nor a licence classifier.
        self.assertIsNone(headers["License"])
        self.assertFalse([c for c in headers.get_all("Classifier", []) if c.startswith("License ::")])

    def test_the_licence_is_apache_2_0_and_the_repositorys(self):
        self.assertIn(b"Apache License\n                           Version 2.0, January 2004", self.license)
        if not os.path.exists(REPO_LICENSE):
            self.skipTest("python/ outside the gpuos repository: no LICENSE above it to compare")
        self.assertEqual(self.license, read(REPO_LICENSE), "python/LICENSE differs from the repository's LICENSE")

    def test_wheel_declares_apache_2_0_and_holds_the_licence(self):
        name = self.backend.build_wheel(self.out.name)
        with zipfile.ZipFile(os.path.join(self.out.name, name)) as wheel:
            dist_info = "gpuos-%s.dist-info" % self.backend._names()[1]
            self.check_metadata(wheel.read(dist_info + "/METADATA").decode())
            self.assertEqual(wheel.read(dist_info + "/licenses/LICENSE"), self.license)
            record = wheel.read(dist_info + "/RECORD").decode()
            self.assertIn(dist_info + "/licenses/LICENSE,sha256=", record)

    def test_sdist_declares_apache_2_0_and_holds_the_licence(self):
        name = self.backend.build_sdist(self.out.name)
        base = name[:-len(".tar.gz")]
        with tarfile.open(os.path.join(self.out.name, name)) as sdist:
            self.check_metadata(sdist.extractfile(base + "/PKG-INFO").read().decode())
            self.assertEqual(sdist.extractfile(base + "/LICENSE").read(), self.license)

    def test_prepared_metadata_and_the_older_pythons_reader_agree(self):
        dist_info = self.backend.prepare_metadata_for_build_wheel(self.out.name)
        self.check_metadata(read(os.path.join(self.out.name, dist_info, "METADATA")).decode())
        self.assertEqual(read(os.path.join(self.out.name, dist_info, "licenses", "LICENSE")), self.license)
        # Python < 3.11 has no tomllib: the backend reads pyproject.toml itself, to the same metadata.
        real = self.backend._metadata()
        saved = sys.modules.get("tomllib")
        sys.modules["tomllib"] = None  # `import tomllib` raises ImportError
        try:
            self.assertEqual(self.backend._metadata(), real)
        finally:
            if saved is None:
                del sys.modules["tomllib"]
            else:
                sys.modules["tomllib"] = saved


if __name__ == "__main__":
    unittest.main()
