"""Plinth's quantization job runner: runs in its own virtualenv (scripts/quantize_env.sh).

``python -m plinth_quantize run --job JOB.json`` with ``tools/quantize`` and the repository root on
PYTHONPATH. The job file is ``runtime.quantize.Job``; stdout carries only the events of
``runtime.quantize.events``, one JSON object a line (the library's own logs go to stderr).
"""
