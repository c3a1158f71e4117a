"""nginx with deploy/nginx/pathfinder.conf as shipped, on ports of your choosing, in a work
directory of its own (pid, logs, temporary files): how the tests and bench/edge.py run it, and a
way to try it before installing the site into /etc/nginx.

    python -m deploy.nginx.local --workdir /tmp/edge --listen 8000 --upstream 8001
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

SITE = Path(__file__).with_name("pathfinder.conf")
TEMP_DIRS = ("body", "proxy", "fastcgi", "uwsgi", "scgi")


def write_config(workdir: Path, listen: int, upstream: int) -> Path:
    """The shipped site on 127.0.0.1:listen before gunicorn on 127.0.0.1:upstream, inside a main
    config of its own; returns the main config's path."""
    workdir.mkdir(parents=True, exist_ok=True)
    site = SITE.read_text()
    site = site.replace("listen 8000;", f"listen 127.0.0.1:{listen};")
    site = site.replace("server 127.0.0.1:8001;", f"server 127.0.0.1:{upstream};")
    (workdir / "pathfinder.conf").write_text(site)
    for name in TEMP_DIRS:
        (workdir / name).mkdir(exist_ok=True)
    # Run as root, nginx's workers would be `nobody`, who cannot reach a private work directory.
    user = "user root;" if os.geteuid() == 0 else ""
    temp = "\n".join(f"    {name}_temp_path {workdir / name};" for name in TEMP_DIRS[1:])
    main = f"""{user}
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {workdir}/access.log;
    default_type application/octet-stream;
    client_body_temp_path {workdir / "body"};
{temp}
    include {workdir}/pathfinder.conf;
}}
"""
    path = workdir / "nginx.conf"
    path.write_text(main)
    return path


def command(config: Path) -> list[str]:
    return ["nginx", "-c", str(config), "-p", str(config.parent)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--listen", type=int, default=8000)
    parser.add_argument("--upstream", type=int, default=8001)
    options = parser.parse_args()
    config = write_config(options.workdir, options.listen, options.upstream)
    subprocess.run(command(config), check=True)


if __name__ == "__main__":
    main()
