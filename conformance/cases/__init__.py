"""The cases room: what the runner runs, read as data.

Case files and their discovery (`case`), the JSON Schemas every file is checked against
(`schemas`), the rule ids the spec defines (`rules`), engine-relative scenarios (`scenarios`) and
the checks of a case file (`validate`). Nothing here runs a backend or writes a report.
"""
