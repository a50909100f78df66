from datetime import timedelta


def booking(team="vision", count=2, start=None, hours=2, **extra):
    body = {"team": team, "gpu_model": "H100-SXM-80GB", "count": count, **extra}
    if start is not None:
        body["start"] = start.isoformat()
        body.setdefault("end", (start + timedelta(hours=hours)).isoformat())
    return body
