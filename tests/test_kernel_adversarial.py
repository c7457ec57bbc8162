"""Model code that loops, allocates, forks, floods, raises, exits or writes where it must not:
each gets a clear message, and the kernel is alive (game variables intact) afterwards."""

from __future__ import annotations

import os

from conftest import alive


def test_infinite_loop_times_out_and_keeps_definitions(make_kernel):
    k = make_kernel(timeout=1.0)
    k.run("keep = 7")
    r = k.run("print('started')\nwhile True:\n    pass")
    assert r.kind == "timeout" and not r.restarted
    assert r.text.startswith("error: Tool timed out after 1s; your definitions were kept.")
    assert r.stdout == "started\n"  # output before the time-out is kept
    assert k.run("print(keep)").stdout == "7\n"
    alive(k)


def test_catching_the_timeout_gets_the_kernel_restarted(make_kernel):
    k = make_kernel(timeout=1.0)
    k.run("keep = 7")
    r = k.run("print('x' * 10)\nwhile True:\n    try:\n        while True:\n            pass\n"
              "    except BaseException:\n        pass")
    assert r.kind == "timeout" and r.restarted
    error = r.text.splitlines()[0]
    assert error.startswith("error: ") and "restarted" in error and "gone" in error
    assert r.stdout.startswith("xxxxxxxxxx")  # streamed before the kill
    assert "NameError" in k.run("keep").error
    alive(k)


def test_deep_recursion(make_kernel):
    k = make_kernel(timeout=3.0)
    r = k.run("def f(n):\n    return f(n + 1)\nf(0)")
    assert r.kind == "error" and "RecursionError" in r.error
    r = k.run("import sys\nsys.setrecursionlimit(10**7)\ndef g(n):\n    return g(n + 1)\ng(0)")
    # RecursionError/MemoryError, a crash (C stack) or the time limit: each restarts cleanly
    assert r.kind in ("error", "crash", "timeout") and r.text.startswith("error:")
    alive(k)


def test_memory_bomb(make_kernel):
    k = make_kernel(memory_mb=512)
    r = k.run("x = bytearray(4 * 10**9)")
    assert r.kind == "error" and "MemoryError" in r.error
    r = k.run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 10**6))")
    assert r.kind in ("error", "crash") and ("MemoryError" in (r.error or "") or r.restarted)
    r = k.run("import numpy as np\na = np.ones((100000, 100000))")
    assert r.kind == "error" and "Unable to allocate" in r.error
    alive(k)


def test_fork_and_processes_are_refused(make_kernel):
    k = make_kernel()
    for code in ("import os\nos.fork()", "import os\nos.system('echo hi')",
                 "import os\nos.kill(os.getppid(), 9)", "import os\nos.execv('/bin/true', ['true'])"):
        r = k.run(code)
        assert r.kind == "error" and "PermissionError" in r.error and "not allowed" in r.error, code
    alive(k)


def test_printing_megabytes(make_kernel):
    k = make_kernel()
    r = k.run("print('a' * 5_000_000)\nfor i in range(100000):\n    print(i)")
    assert r.kind == "ok"
    assert len(r.stdout) < 4200 and r.stdout_total > 5_000_000
    assert "only the first and last parts are shown)" in r.text
    assert r.stdout.startswith("aaaa") and r.stdout.endswith("99999\n") and "chars cut" in r.stdout
    alive(k)


def test_raising_base_exceptions(make_kernel):
    k = make_kernel()
    k.run("keep = 1")
    for code, name in (("raise SystemExit(3)", "SystemExit: 3"), ("exit()", "SystemExit"),
                       ("raise KeyboardInterrupt", "KeyboardInterrupt"),
                       ("raise BaseException('boom')", "BaseException: boom"),
                       ("raise GeneratorExit", "GeneratorExit")):
        r = k.run(code)
        assert r.kind == "error" and name in r.error, code
    assert k.run("print(keep)").stdout == "1\n"
    alive(k)


def test_os_exit(make_kernel):
    k = make_kernel()
    r = k.run("print('bye')\nimport os\nos._exit(3)")
    assert r.kind == "crash" and r.restarted and "exit 3" in r.text.splitlines()[0]
    assert r.stdout == "bye\n"
    alive(k)


def test_closing_stdout(make_kernel):
    k = make_kernel()
    r = k.run("import sys\nsys.stdout.close()\nprint('still here')")
    assert r.kind == "ok" and r.stdout == "still here\n"
    r = k.run("import sys, os\nsys.stdout = None\nos.close(1)\nos.close(2)")
    assert r.kind == "ok"
    assert k.run("print('back')").stdout == "back\n"
    alive(k)


def test_refused_imports(make_kernel):
    k = make_kernel()
    for mod in ("subprocess", "socket", "ctypes", "multiprocessing", "importlib"):
        r = k.run(f"import {mod}")
        assert r.kind == "error" and f"Module '{mod}' is not available in the kernel" in r.error
    assert k.run("import numpy, collections, itertools, math, re, json, time, os").kind == "ok"
    alive(k)


def test_writing_files_outside_the_temp_dir(make_kernel, tmp_path):
    k = make_kernel()
    target = tmp_path / "escaped.txt"
    r = k.run(f"open({str(target)!r}, 'w').write('x')")
    assert r.kind == "error" and "PermissionError" in r.error and not target.exists()
    r = k.run("import os\nos.remove('/etc/hostname')")
    assert "PermissionError" in r.error
    r = k.run("open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read(), os.getcwd() != '/')")
    assert r.kind == "ok" and r.stdout == "ok True\n"
    games = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "games", "README.md")
    r = k.run(f"open({games!r}).read()")  # no peeking at the games' rules
    assert "PermissionError" in r.error and "reading" in r.error
    r = k.run("open('big.bin', 'wb').write(b'0' * (64 << 20))")
    assert r.kind == "error" and "File too large" in r.error
    alive(k)
    assert os.path.exists(k.workdir)
