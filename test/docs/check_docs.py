#!/usr/bin/env python3
"""Fails when a document names a setting, an SQL object or a file that does
not exist (issue 26, item 2).

The documents: README.md, CONTRIBUTING.md, RELIABILITY.md and docs/*.md
(BENCHMARKS.md and bench/results/ record past runs, and name what existed
then).  What they are checked against:

  settings     every pg_fencing.NAME must be a setting the module defines
               (src/backend/settings.cpp), and docs/settings.md, once it
               exists, must list every one of them;
  SQL names    every fencing_NAME must be an object of the installed
               extension (function, procedure, table, view, type, operator
               class or family: read from the database given by the usual
               PG* environment, where CREATE EXTENSION pg_fencing has run), or
               a name the code uses otherwise (the notification channel, a
               metric, a C++ identifier: found in src/, include/, demo/,
               examples/, test/ or bench/ outside SQL scripts of the
               extension), or one of HISTORICAL below;
  files        every path in backquotes or in a relative link must exist in
               the tree (git ls-files, or a directory holding such files),
               and every link to a heading (FILE.md#anchor, #anchor) must
               find that heading;
  META.json    provides.file must exist, and its version must be the
               control file's default_version.

Prints every problem as FILE:LINE: what, and exits 1 if there is any.
Run from the project's root: python3 test/docs/check_docs.py [DOCUMENT...]
"""
import json
import os
import re
import subprocess
import sys

# Names the documents use on purpose although no current object has them:
# objects of earlier versions, named where the documents say what changed.
HISTORICAL = {
}

# Paths of other projects' trees that the documents name.
EXTERNAL_PATHS = {
    "src/tools/valgrind.supp",  # PostgreSQL's suppressions for valgrind
}

FILE_SUFFIXES = (".sh", ".pl", ".pm", ".sql", ".out", ".cpp", ".hpp", ".md", ".spec",
                 ".json", ".py", ".js", ".ts", ".gp", ".awk", ".control", ".pgb", ".txt",  # no .h: ours are .hpp
                 ".yml", ".yaml", ".conf", ".png", ".csv", ".cmake", ".in")
TOP_LEVEL = ("src/", "sql/", "expected/", "test/", "bench/", "scripts/", "docs/", "examples/",
             "include/", "demo/", "extension/", "debian/", "cmake/", "clients/", ".ci/")


def tree_files():
    """The tree's files: git's list, or, outside a git checkout (a copy of
    the tree, or one git refuses as owned by another user), a walk of it."""
    listed = subprocess.run(["git", "ls-files"], capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return set(listed.stdout.split("\n")) - {""}
    skipped = {".git", "build", "build-asan", "results", "output_iso", "tmp_check"}
    files = set()
    for root, dirnames, names in os.walk("."):
        dirnames[:] = [d for d in dirnames if d not in skipped]
        files.update(os.path.relpath(os.path.join(root, n), ".") for n in names)
    return files


def git_files():
    files = tree_files()
    dirs = set()
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    return files, dirs


def documents(files):
    if len(sys.argv) > 1:  # the documents named on the command line instead
        return sys.argv[1:]
    docs = ["README.md", "CONTRIBUTING.md", "RELIABILITY.md"]
    docs += sorted(f for f in files if f.startswith("docs/") and f.endswith(".md"))
    return [d for d in docs if d in files]


def defined_settings():
    text = open("src/backend/settings.cpp", encoding="utf-8").read()
    return set(re.findall(r'"pg_fencing\.([a-z_]+)"', text))


def query_output(query):
    return subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", query],
                          check=True, capture_output=True, text=True).stdout


def extension_objects():
    # Each member's identity ("schema.fencing_acquire(text,text,interval)",
    # "schema.fencing_token_btree_ops USING btree", ...) names it.
    query = """
      SELECT (pg_identify_object(d.classid, d.objid, d.objsubid)).identity
        FROM pg_depend d
       WHERE d.deptype = 'e'
         AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_fencing')"""
    names = set(re.findall(r"\bfencing_[a-z0-9_]+", query_output(query)))
    # The names the current functions give what they make (policies,
    # triggers, lock names): in their bodies.
    bodies = query_output("""
      SELECT p.prosrc FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
       WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
         AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_fencing')""")
    names.update(re.findall(r"\bfencing_[a-z0-9_]+", bodies))
    if not names:
        sys.exit("check_docs: the database has no extension pg_fencing to check against")
    return names


def names_in_code(files):
    """fencing_ names the code uses outside the extension's SQL scripts."""
    names = set()
    roots = ("src/", "include/", "demo/", "examples/", "test/", "bench/", "scripts/")
    for f in files:
        if not f.startswith(roots) or f.startswith("test/docs/"):
            continue
        if f.endswith((".png", ".csv", ".out")):
            continue
        try:
            text = open(f, encoding="utf-8", errors="replace").read()
        except (IsADirectoryError, FileNotFoundError):
            continue
        names.update(re.findall(r"\bfencing_[a-z0-9_]+", text))
    return names


def path_candidates(doc, line):
    """Paths named in backquotes or as relative link targets."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", line):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        found.append(("link", target.split("#")[0]))
    for span in re.findall(r"`([^`]+)`", line):
        span = span.strip()
        if " " in span or any(c in span for c in "<>*$={}|\\'\"(),;"):
            continue
        if span.startswith(("/", "~", "-", "http")) or "::" in span:
            continue
        if not (span.startswith(TOP_LEVEL) or (("/" in span or "." in span)
                                                and span.endswith(FILE_SUFFIXES))):
            continue
        found.append(("code", span))
    return found


def path_exists(doc, kind, path, files, dirs):
    path = re.sub(r":\d+(-\d+)?$", "", path).rstrip("/")
    if not path or path in EXTERNAL_PATHS:
        return True
    candidates = [path]
    base = os.path.dirname(doc)
    if base:
        candidates.append(os.path.normpath(os.path.join(base, path)))
    for c in candidates:
        if c in files or c in dirs:
            return True
    if kind == "code" and "/" not in path:
        # A bare file name (`lib.sh`): somewhere in the tree.
        return any(f.endswith("/" + path) or f == path for f in files)
    return False


def heading_anchors(doc):
    """The anchors GitHub gives a document's headings: lower case, all but
    letters, digits, spaces, '-' and '_' dropped, spaces made '-'; a repeated
    anchor gets -1, -2, ..."""
    anchors, seen, in_fence = set(), {}, False
    for line in open(doc, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if in_fence or not re.match(r"^#{1,6} ", line):
            continue
        title = re.sub(r"^#{1,6} ", "", line.strip())
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def link_anchors(doc, line):
    """(target document, anchor) of each link with an anchor into a Markdown file."""
    for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", line):
        if re.match(r"^[a-z]+:", target):
            continue
        path, anchor = target.split("#", 1)
        path = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if path.endswith(".md"):
            yield path, anchor


def main():
    files, dirs = git_files()
    settings = defined_settings()
    objects = extension_objects()
    code_names = names_in_code(files)
    problems = []
    anchors_of = {}
    setting_suffixes = {"so", "control", "stat"}
    for doc in documents(files):
        for number, line in enumerate(open(doc, encoding="utf-8"), 1):
            where = f"{doc}:{number}"
            for name in re.findall(r"(?<![\w/.-])pg_fencing\.([a-z_]+)\b(?!\.\w|/)", line):
                if name in setting_suffixes:
                    continue
                if name not in settings:
                    problems.append(f"{where}: setting pg_fencing.{name} is not defined "
                                    f"(src/backend/settings.cpp)")
            for path, anchor in link_anchors(doc, line):
                if os.path.isfile(path) and anchor not in anchors_of.setdefault(path, heading_anchors(path)):
                    problems.append(f"{where}: link to {path}#{anchor}: no such heading")
            prose = re.sub(r"\]\([^)]*\)", "]", line)  # link targets are not names
            for name in re.findall(r"(?<![\w:])fencing_[a-z0-9_]+", prose):
                name = name.rstrip("_")
                if name in objects or name in code_names or name in HISTORICAL:
                    continue
                problems.append(f"{where}: {name} is neither an object of the extension nor a "
                                f"name the code uses")
            for kind, path in path_candidates(doc, line):
                if not path_exists(doc, kind, path, files, dirs):
                    problems.append(f"{where}: file {path} does not exist")
    if "docs/settings.md" in files:
        listed = set(re.findall(r"pg_fencing\.([a-z_]+)", open("docs/settings.md", encoding="utf-8").read()))
        for name in sorted(settings - listed):
            problems.append(f"docs/settings.md: setting pg_fencing.{name} is defined but not listed")
    meta = json.load(open("META.json", encoding="utf-8"))
    control = open("pg_fencing.control", encoding="utf-8").read()
    default_version = re.search(r"default_version\s*=\s*'([^']+)'", control).group(1)
    for name, provided in meta["provides"].items():
        if provided["file"] not in files:
            problems.append(f"META.json: provides.{name}.file {provided['file']} does not exist")
        if not provided["version"].startswith(default_version + "."):
            problems.append(f"META.json: provides.{name}.version {provided['version']} is not "
                            f"the control file's default_version {default_version}")
    for p in problems:
        print(p)
    print(f"check_docs: {len(documents(files))} documents, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
