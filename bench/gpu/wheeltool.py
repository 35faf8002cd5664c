"""Small wheel chores for the kit (standard library + pip's vendored packaging only).

python3 bench/gpu/wheeltool.py deps WHEEL_DIR WHEELS_TXT IMAGE_TXT
    every Requires-Dist of every wheel (markers evaluated for CPython 3.12 on Linux x86_64,
    no extras) must name a carried wheel or an image package; exit 1 listing the others
python3 bench/gpu/wheeltool.py record UNPACKED_WHEEL_DIR
    rewrite the dist-info RECORD (sha256, size) after files were changed (stripped)
python3 bench/gpu/wheeltool.py zip UNPACKED_WHEEL_DIR OUT.whl
    zip an unpacked wheel back into a wheel pip installs (stored, not deflated: fast)
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sys
import zipfile
from pathlib import Path


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def names_in(path: Path) -> set[str]:
    words = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0]
        words += line.split()
    return {norm(re.split(r"[=<>!~\[; ]", w, maxsplit=1)[0]) for w in words if w}


def deps(wheel_dir: str, wheels_txt: str, image_txt: str) -> int:
    from pip._vendor.packaging.requirements import Requirement

    env = {
        "python_version": "3.12",
        "python_full_version": "3.12.3",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    carried, image = names_in(Path(wheels_txt)), names_in(Path(image_txt))
    missing = []
    for wheel in sorted(Path(wheel_dir).glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode().splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = norm(req.name)
            where = "carried" if name in carried else "image" if name in image else None
            if where is None:
                missing.append(f"{wheel.name}: {req}")
            else:
                print(f"{wheel.name.split('-')[0]:28s} needs {str(req):40s} ({where})")
    for m in missing:
        print(f"MISSING {m}")
    return 1 if missing else 0


def record(root: str) -> int:
    base = Path(root)
    (rec,) = base.glob("*.dist-info/RECORD")
    rows = []
    for line in rec.read_text().splitlines():
        if not line.strip():
            continue
        name = line.rsplit(",", 2)[0]
        path = base / name
        if path == rec or not path.is_file():
            rows.append(f"{name},,")
            continue
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    rec.write_text("\n".join(rows) + "\n")
    print(f"rewrote {rec} ({len(rows)} entries)")
    return 0


def zip_wheel(root: str, out: str) -> int:
    base = Path(root)
    files = sorted(p for p in base.rglob("*") if p.is_file() or p.is_symlink())
    # dist-info last, as wheel tools write it.
    files.sort(key=lambda p: ".dist-info/" in p.relative_to(base).as_posix())
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for path in files:
            z.write(path, path.relative_to(base).as_posix())
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB, {len(files)} files)")
    return 0


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    sys.exit({"deps": deps, "record": record, "zip": zip_wheel}[command](*args))
