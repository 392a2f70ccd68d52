"""Pools `blockpilot measure --json-out` reports of the same prompts and policies run in different
orders (e.g. the policy list reversed, so that no policy always runs first on a prompt): per policy,
seconds, tokens and steps are summed over the reports and tau averaged, and so is each prompt's record
(tokens, decode seconds and step counts summed, tau averaged), so that per-prompt intervals see every
report; the output keeps the first report's policy order. usage: pool_measure.py OUT.json REPORT.json [...]"""
import json
import sys


def pooled_prompts(first, runs):
    """Each prompt's record over the runs: counts and seconds summed, tau averaged, the rest the first run's."""
    n = len(first["tau"])
    if any(len(run["tau"]) != n for run in runs):
        sys.exit("pool_measure.py: the reports differ in prompts or rounds")
    out = {"tau": [sum(run["tau"][i] for run in runs) / len(runs) for i in range(n)]}
    for key in ("tokens", "decode_seconds"):
        if key in first:
            out[key] = [sum(run[key][i] for run in runs) for i in range(n)]
    for key in ("steps_by_block", "steps_by_length"):
        if key in first:
            out[key] = [[sum(c) for c in zip(*(run[key][i] for run in runs))] for i in range(n)]
    return out

out, paths = sys.argv[1], sys.argv[2:]
reports = [json.load(open(p)) for p in paths]
pooled = dict(reports[0], pooled_from=paths)
policies = []
for first in reports[0]["policies"]:
    runs = [next(p for p in r["policies"] if p["policy"] == first["policy"]) for r in reports]
    seconds = {k: sum(run["seconds"][k] for run in runs) for k in first["seconds"]}
    generated = sum(run["generated"] for run in runs)
    prompts = sum(len(run["tau"]) for run in runs)
    decode = seconds["total"] - seconds["prefill"]
    policies.append(dict(first, **pooled_prompts(first, runs), generated=generated, steps=sum(run["steps"] for run in runs), seconds=seconds,
                         fallbacks=sum(run["fallbacks"] for run in runs),
                         mean_tau=sum(run["mean_tau"] for run in runs) / len(runs),
                         decode_tokens_per_second=(generated - prompts) / decode if decode > 0 else 0.0,
                         tokens_per_second=generated / seconds["total"] if seconds["total"] > 0 else 0.0))
pooled["policies"] = policies
json.dump(pooled, open(out, "w"), indent=2)
for p in policies:
    base = policies[0]["decode_tokens_per_second"]
    print(f"{p['policy'][-40:]:>40}  tau {p['mean_tau']:.4f}  decode {p['decode_tokens_per_second']:6.2f} t/s  "
          f"{p['decode_tokens_per_second'] / base:.3f}x  policy {1e3 * p['seconds']['policy'] / len(p['tau']) / len(paths):.3f} ms "
          f"({100 * p['seconds']['policy'] / p['seconds']['total']:.4f} %)")
