"""The ops page's memory: Activity rows folded from the log (rows.py), kept in SQLite
(store.py) with runner samples (sampler.py) and captured bodies (capture.py), and the plots'
series worked out from them (history.py)."""
