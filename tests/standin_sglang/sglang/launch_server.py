"""Stand-in for ``python -m sglang.launch_server``: SGLang's start-up log, then the simulator's API.

It takes SGLang's command line (only --port, --speculative-num-steps, --speculative-eagle-topk,
--speculative-num-draft-tokens and the admin-api-key in --config's YAML are read; the draft's shape must be
the preset's, or it exits 2 as SGLang would on a mismatched draft), prints SGLang's own start-up log
lines slowly, then starts a child
process, as SGLang starts its ranks, which serves SGLang's endpoints through
specctl's simulator; the main process exits (17) when that child dies. Behaviour knobs come from the environment:
STANDIN_IGNORE_SIGTERM=1, STANDIN_CRASH_AFTER=SECONDS, STANDIN_PIDFILE=PATH
(where the rank's pid is written), STANDIN_STEP_S (delay between log lines),
STANDIN_PRESET (the simulator preset, which decides the attention backend it reports). The draft depths
are the plugin's: the candidates in SPECCTL_SETTINGS, priced only with SPECCTL_DEPTH_COSTS's table; the
acceptance floor (min_accept) is SPECCTL_SETTINGS' too.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from specctl.runtime.sim.presets import get_preset

LOG = [
    "Load weight begin. avail mem=139.20 GB",
    "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.50it/s]",
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.50it/s]",
    "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=124.10 GB",
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 845377, K size: 51.60 GB",
    "Memory pool end. avail mem=18.20 GB",
    "Capture cuda graph begin. This can take up to several minutes. avail mem=18.00 GB",
    "Capturing batches (bs=256 avail_mem=17.90 GB):  50%|#####     | 18/36 [00:02<00:02,  8.00it/s]",
    "Capturing batches (bs=1 avail_mem=17.50 GB): 100%|##########| 36/36 [00:04<00:00,  8.00it/s]",
]


def _depth_args() -> list[str]:
    """The plugin's view of depths: the candidates in SPECCTL_SETTINGS, priced only with SPECCTL_DEPTH_COSTS,
    and the acceptance floor there (at 1 draft step the default, 1.3, is refused: the launch sets its own)."""
    settings = json.loads(os.environ.get("SPECCTL_SETTINGS") or "{}")
    candidates = settings.get("candidates") or []
    out = ["--set", "candidates=" + ",".join(map(str, candidates))] if candidates else []
    if "min_accept" in settings:
        out += ["--set", f"min_accept={settings['min_accept']}"]
    costs = os.environ.get("SPECCTL_DEPTH_COSTS")
    return out + (["--depth-costs", costs] if costs else ["--no-depth-costs"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--speculative-num-steps", type=int, default=3)
    ap.add_argument("--speculative-eagle-topk", type=int, default=1)
    ap.add_argument("--speculative-num-draft-tokens", type=int)
    ap.add_argument("--config")  # SGLang's YAML of options; the stand-in reads its admin-api-key, as SGLang would
    args, _ = ap.parse_known_args()
    preset = get_preset(os.environ.get("STANDIN_PRESET", "h200-llama8b"))
    tree = (args.speculative_eagle_topk, args.speculative_num_draft_tokens if args.speculative_eagle_topk > 1 else None)
    if tree != (preset.topk, preset.draft_tokens if preset.topk > 1 else None):
        sys.exit(f"stand-in: the launch drafts topk {tree[0]} with {tree[1]} draft tokens, the preset {preset.name} "
                 f"topk {preset.topk} with {preset.draft_tokens}")
    env = dict(os.environ)
    if args.config:
        for line in open(args.config, encoding="utf-8"):
            key, _, value = line.partition(":")
            if key.strip() == "admin-api-key":  # the rank (the simulator) then guards its control endpoints
                env["SPECCTL_SIM_ADMIN_KEY"] = value.strip().strip('"')
    if os.environ.get("STANDIN_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    step = float(os.environ.get("STANDIN_STEP_S", "0.3"))
    # SGLang 0.5.17 logs every argument at start, the admin key in clear among them
    api_key = next((a.split("=", 1)[1] if "=" in a else sys.argv[i + 2] for i, a in enumerate(sys.argv[1:])
                    if a.split("=", 1)[0] == "--api-key" and ("=" in a or i + 2 < len(sys.argv))), None)
    admin = env.get("SPECCTL_SIM_ADMIN_KEY")
    print(f"server_args=ServerArgs(model_path='/models/llama', port={args.port}, api_key={api_key!r}, "
          f"admin_api_key={admin!r}, speculative_num_steps={args.speculative_num_steps})", flush=True)
    for line in LOG:
        print(line, flush=True)
        time.sleep(step)
    # the "rank": a child process that serves the HTTP API, as SGLang's processes do together
    rank = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--host", "127.0.0.1",
                             "--port", str(args.port), "--steps", str(args.speculative_num_steps),
                             "--gpus", "1", "--load", "steady:c=8",
                             "--preset", os.environ.get("STANDIN_PRESET", "h200-llama8b"), *_depth_args()],
                            stdout=subprocess.DEVNULL, env=env)
    if path := os.environ.get("STANDIN_PIDFILE"):
        with open(path, "w") as fh:
            fh.write(str(rank.pid))
    print("The server is fired up and ready to roll!", flush=True)
    crash_at = time.monotonic() + float(os.environ.get("STANDIN_CRASH_AFTER", "1e9"))
    while rank.poll() is None and time.monotonic() < crash_at:
        time.sleep(0.1)
    os._exit(17)


if __name__ == "__main__":
    main()
