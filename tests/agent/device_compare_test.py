#!/usr/bin/env python3
"""scripts/device-compare (the comparison scripts/device-check makes on a GPU machine) on saved
nvidia-smi outputs: an H200 node with MIG that agrees, the same node where every compared field
disagrees, and the real nvml_probe's output from the fake NVML library.

  device_compare_test.py NVML_PROBE FAKE_NVML_LIBRARY
"""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "device-compare")
DATA = os.path.join(ROOT, "tests", "agent", "device_check")
PROBE, FAKE_NVML = sys.argv[1], sys.argv[2]


def compare(probe, smi, smi_list=None):
    cmd = [sys.executable, SCRIPT, "--probe", probe, "--smi", os.path.join(DATA, smi)]
    if smi_list:
        cmd += ["--smi-list", os.path.join(DATA, smi_list)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


class DeviceCompare(unittest.TestCase):
    def test_agreeing_h200_with_mig(self):
        rc, out, err = compare(os.path.join(DATA, "h200-probe.json"), "h200-smi.csv",
                               "h200-smi-L.txt")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(err, "")
        self.assertIn("MIG Enabled: 1g.18gb, 3g.71gb", out)
        self.assertIn("not compared: uncorrected ECC", out)  # [N/A] in nvidia-smi, -1 here

    def test_every_field_that_differs_is_named(self):
        rc, out, err = compare(os.path.join(DATA, "h200-probe.json"), "h200-smi-differs.csv",
                               "h200-smi-L-differs.txt")
        self.assertEqual(rc, 1, out + err)
        expected = [
            "GPU 0: name NVIDIA H200 (NVML backend) vs NVIDIA H200 NVL (nvidia-smi)",
            "GPU 0: temperature 31 (NVML backend) vs 45 (nvidia-smi)",
            "GPU 0: uncorrected ECC 0 (NVML backend) vs 2 (nvidia-smi)",
            "GPU 0: MIG device MIG-aaaa0000-0000-0000-0000-000000000001 profile 1g.18gb (NVML "
            "backend) vs 1g.16gb (nvidia-smi)",
            "GPU 0: MIG device MIG-aaaa0000-0000-0000-0000-000000000003 (1g.18gb) listed by "
            "nvidia-smi -L is missing from the NVML backend",
            "GPU 1: PCI bus id 00000000:43:00.0 (NVML backend) vs 00000000:44:00.0 (nvidia-smi)",
            "GPU 1: power 74.9 (NVML backend) vs 175.00 (nvidia-smi)",
            "GPU 1: uncorrected ECC unknown (NVML backend) vs 0 (nvidia-smi)",
            "GPU 1: memory used 4 (NVML backend) vs 1500 (nvidia-smi)",
            "GPU 1: MIG mode Disabled (NVML backend) vs Enabled (nvidia-smi)",
        ]
        got = [line.removeprefix("device-compare: MISMATCH: ") for line in err.splitlines()]
        self.assertEqual(got, expected)
        self.assertNotIn("bus id 00000000:1B", err, "bus ids compare without case")

    def test_real_probe_output_from_the_fake_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "probe.json")
            with open(path, "w", encoding="utf-8") as f:
                subprocess.run([PROBE, "--library", FAKE_NVML, "--samples", "2",
                                "--interval-ms", "10"], stdout=f, check=True, timeout=60)
            rc, out, err = compare(path, "fake-smi.csv")
            self.assertEqual(rc, 0, out + err)
            self.assertIn("GPU 1 GPU-5e1f0000-0000-0000-0000-000000000001 NVIDIA H100 80GB HBM3 "
                          "00000000:19:00.0: 41 C (smi 41)", out)

    def test_missing_gpu_and_bad_input(self):
        rc, _, err = compare(os.path.join(DATA, "h200-probe.json"), "fake-smi.csv")
        self.assertEqual(rc, 1)
        self.assertIn("GPU 0: UUID GPU-aaaa0000-0000-0000-0000-000000000000 (NVML backend) vs "
                      "GPU-5e1f0000-0000-0000-0000-000000000000 (nvidia-smi)", err)
        rc, _, err = compare(os.path.join(DATA, "h200-smi.csv"), "h200-smi.csv")
        self.assertEqual(rc, 2)
        self.assertIn("device-compare: ", err)
        with tempfile.TemporaryDirectory() as tmp:
            short = os.path.join(tmp, "short.csv")  # absolute: compare() keeps it as is
            with open(short, "w", encoding="utf-8") as f:
                f.write("0, GPU-x, NVIDIA H200\n")
            rc, _, err = compare(os.path.join(DATA, "h200-probe.json"), short)
        self.assertEqual(rc, 2)
        self.assertIn(":1: 3 fields, expected 10 (index,uuid,name,pci.bus_id,", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
