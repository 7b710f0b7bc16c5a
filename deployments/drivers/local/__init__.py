"""The local driver: endpoints as processes on this machine (simulated or real SGLang, and smg)."""
