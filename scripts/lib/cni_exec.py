#!/usr/bin/env python3
"""Minimal CNI conflist executor (what a container runtime's libcni does; Debian has no cnitool).

  cni_exec.py ADD|DEL|CHECK <conflist.json> <cache-dir>

The CNI_* variables (CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS, CNI_PATH) come from the
environment. ADD runs every plugin of the list in order, threading each result into the next one's
`prevResult`, caches the final result in <cache-dir>/<name>-<containerid>.json and prints it. CHECK
runs the list in order with the cached result as prevResult. DEL runs the list in reverse with the
cached result (if any) and removes the cache entry. On a plugin failure it prints the plugin's CNI
error object on stdout, names the plugin on stderr and exits with the plugin's exit status.
With CNI_EXEC_TRACE_DIR set, each plugin's stdout is also saved there as
<containerid>-<COMMAND>-<index in the list>-<type>.json (tests compare them); with CNI_EXEC_TIMING
set, each plugin's run time goes to stderr.
"""
import json
import os
import subprocess
import sys
import time


def find_plugin(plugin_type):
    for d in os.environ.get("CNI_PATH", "").split(":"):
        path = os.path.join(d, plugin_type)
        if d and os.access(path, os.X_OK):
            return path
    return None


def run_plugin(command, conf, plugin, prev):
    net = dict(plugin)
    net["cniVersion"] = conf["cniVersion"]
    net["name"] = conf["name"]
    if prev is not None:
        net["prevResult"] = prev
    path = find_plugin(plugin["type"])
    if path is None:
        err = {"cniVersion": conf["cniVersion"], "code": 7,
               "msg": "failed to find plugin %r in CNI_PATH" % plugin["type"]}
        return 1, json.dumps(err)
    env = dict(os.environ, CNI_COMMAND=command)
    started = time.monotonic()
    p = subprocess.run([path], input=json.dumps(net).encode(), env=env,
                       stdout=subprocess.PIPE, timeout=30)
    if os.environ.get("CNI_EXEC_TIMING"):
        sys.stderr.write("cni_exec: %s %s %.1f ms exit %d\n" % (command, plugin["type"],
                                                              (time.monotonic() - started) * 1000, p.returncode))
    trace = os.environ.get("CNI_EXEC_TRACE_DIR")
    if trace:
        os.makedirs(trace, exist_ok=True)
        name = "%s-%s-%d-%s.json" % (os.environ["CNI_CONTAINERID"], command, conf["plugins"].index(plugin),
                                     plugin["type"])
        with open(os.path.join(trace, name), "wb") as f:
            f.write(p.stdout)
    return p.returncode, p.stdout.decode()


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("ADD", "DEL", "CHECK"):
        sys.stderr.write(__doc__)
        return 2
    command, conflist, cache_dir = sys.argv[1:]
    with open(conflist) as f:
        conf = json.load(f)
    os.makedirs(cache_dir, exist_ok=True)
    cache = os.path.join(cache_dir, "%s-%s.json" % (conf["name"], os.environ["CNI_CONTAINERID"]))
    cached = None
    if os.path.exists(cache):
        with open(cache) as f:
            cached = json.load(f)

    plugins = conf["plugins"]
    if command == "ADD":
        prev = None
        for plugin in plugins:
            rc, out = run_plugin("ADD", conf, plugin, prev)
            if rc != 0:
                sys.stdout.write(out)
                sys.stderr.write("cni_exec: ADD failed in plugin %s (exit %d)\n" % (plugin["type"], rc))
                return rc
            prev = json.loads(out)
        with open(cache + ".tmp", "w") as f:
            json.dump(prev, f)
        os.rename(cache + ".tmp", cache)
        print(json.dumps(prev))
        return 0
    if command == "CHECK":
        if cached is None:
            sys.stderr.write("cni_exec: CHECK without a cached ADD result\n")
            return 1
        for plugin in plugins:
            rc, out = run_plugin("CHECK", conf, plugin, cached)
            if rc != 0:
                sys.stdout.write(out)
                sys.stderr.write("cni_exec: CHECK failed in plugin %s (exit %d)\n" % (plugin["type"], rc))
                return rc
        return 0
    # DEL: reverse order, every plugin even after a failure (report the first failure).
    first_rc, first_out = 0, ""
    for plugin in reversed(plugins):
        rc, out = run_plugin("DEL", conf, plugin, cached)
        if rc != 0 and first_rc == 0:
            first_rc, first_out = rc, out
            sys.stderr.write("cni_exec: DEL failed in plugin %s (exit %d)\n" % (plugin["type"], rc))
    if first_rc == 0 and os.path.exists(cache):
        os.remove(cache)
    sys.stdout.write(first_out)
    return first_rc


if __name__ == "__main__":
    sys.exit(main())
