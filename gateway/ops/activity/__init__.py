"""The ops page's memory: Activity rows folded from the log (rows.py), kept in SQLite
(store.py, on its file's connection in database.py, written by writer.py's thread) with
runner samples (sampler.py) and captured bodies (capture.py), and the plots' series worked
out from them (history.py)."""
