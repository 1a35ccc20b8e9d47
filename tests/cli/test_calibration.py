#!/usr/bin/env python3
"""bench/predict.py's calibration: the profile it writes makes the time model's step equal the
measured one, also where overlap hides communication behind the compute it solves for (stage 3's
prefetched gathers), and the codec rates it is given reach the plan.

  python3 tests/cli/test_calibration.py build/cli/zero
"""
import json, os, sys, tempfile, types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import predict  # noqa: E402


def main():
    zero = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="zero-calibration-")
    a = types.SimpleNamespace(zero=zero, preset="gpt-nano", global_batch=12)
    node = ("--ranks-per-node", "2")
    saved = predict.plan
    failures = []
    for stage in (2, 3):
        def at_stage(a_, n, profile, tmp_, extra=(), stage=stage):  # the calibration reads "0"
            return {0: saved(a_, n, profile, tmp_, tuple(extra) + ("--stage", str(stage)))[stage]}
        predict.plan = at_stage
        # A 200 Mb/s link between two nodes of 2 ranks, a step of 242 ms of which the optimizer
        # took 1.5 ms, and a peak that makes every stage's compute well below the step.
        measured = {"peak_flops": 4e11, "stages": [
            {"stage": 0, "median_seconds": 0.242, "split": {"optimizer": 0.0015}}]}
        codec = {"quantize_ns": 3.0, "dequantize_add_ns": 1.0}
        path, prof = predict.calibrate(a, 4, measured, 2.0e9, 0.0, tmp, nodes=2, inter=0.0235e9,
                                       extra=node, codec=codec)
        predict.plan = saved
        with open(path) as f:
            written = json.load(f)
        t = saved(a, 4, path, tmp, node + ("--stage", str(stage)))[stage]["time"]
        if abs(t["step_seconds"] - 0.242) > 1e-4:
            failures.append(f"stage {stage}: the calibrated profile's step is "
                            f"{t['step_seconds']:.6f} s, not the measured 0.242")
        if written.get("quantize_ns") != 3.0 or written.get("dequantize_add_ns") != 1.0:
            failures.append(f"stage {stage}: the codec rates did not reach the profile: {written}")
        q = saved(a, 4, path, tmp, node + ("--stage", str(stage), "--compress-grads", "int8"))
        if not q[stage]["time"]["codec_seconds"] > 0:
            failures.append(f"stage {stage}: an int8 plan on the profile prices no codec")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("calibration: ok")


if __name__ == "__main__":
    main()
