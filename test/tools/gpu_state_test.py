#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/colocation/gpu_state.py: parsing nvidia-smi's samples and the sampler's life cycle."""
import os
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "colocation"))
import gpu_state  # noqa: E402

FAKE = os.path.join(HERE, "fake_bin", "nvidia-smi")


class Parse(unittest.TestCase):
    def test_figures_skip_lines_that_are_not_three_numbers(self):
        s = gpu_state.parse("1980, 40, 300\n[N/A], [N/A], [N/A]\n1755, 60, 500.5\n1800, 50\n1900, 50, 400\n")
        self.assertEqual(s["samples"], 3)
        self.assertEqual(s["sm_mhz"], {"min": 1755, "median": 1900, "max": 1980})
        self.assertEqual(s["temp_c"]["max"], 60)
        self.assertEqual(s["power_w"]["median"], 400)
        self.assertIn("SM clock median 1900 MHz (min 1755), 40-60 C", gpu_state.describe(s))

    def test_nothing_parsed_is_none(self):
        self.assertIsNone(gpu_state.parse(""))
        self.assertIsNone(gpu_state.parse("No devices were found\n"))
        self.assertIsNone(gpu_state.describe(None))


class SamplerLife(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gst-")

    def test_samples_until_stopped(self):
        s = gpu_state.Sampler(os.path.join(self.dir, "g.csv"), 50, binary=FAKE)
        s.start()
        time.sleep(0.4)
        state = s.stop()
        self.assertIsNotNone(state)
        self.assertGreaterEqual(state["samples"], 2)
        self.assertEqual(state["sm_mhz"]["median"], 1980)
        self.assertIsNone(s.stop())  # stopped once

    def test_without_nvidia_smi_or_period_it_does_nothing(self):
        for s in (gpu_state.Sampler(os.path.join(self.dir, "a.csv"), 50, binary="/nonexistent/nvidia-smi"),
                  gpu_state.Sampler(os.path.join(self.dir, "b.csv"), 0, binary=FAKE)):
            s.start()
            self.assertIsNone(s.stop())


if __name__ == "__main__":
    unittest.main()
