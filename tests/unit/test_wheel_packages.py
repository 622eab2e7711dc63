"""The wheel (pyproject.toml's [tool.setuptools]) holds every package of deploy/ and every folder of
templates/: a folder added or renamed without its line there makes an installed gpu-node fail to
import or to render (tests/e2e/test_package.py installs the wheel; this says which line is missing)."""

from __future__ import annotations

from pathlib import Path

from deploy.foundations.toml_layout import tomllib

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_lists_every_package_of_deploy_and_every_template_folder():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = {
        ".".join(("gpu_node", *init.parent.relative_to(REPO / "deploy").parts))
        for init in (REPO / "deploy").rglob("__init__.py")
    }
    templates = {
        ".".join(("gpu_node.template_files", *folder.relative_to(REPO / "templates").parts))
        for folder in {template.parent for template in (REPO / "templates").rglob("*.j2")}
    }
    # deploy/shell/ holds the node's scripts, no Python: a data package (deploy/foundations/shell_scripts.py reads it)
    scripts = {"gpu_node.shell"} if any((REPO / "deploy" / "shell").glob("*.sh")) else set()
    # deploy/schemas/ holds the reports' JSON Schema files: a data package too
    schemas = {"gpu_node.schemas"} if any((REPO / "deploy" / "schemas").glob("*.schema.json")) else set()
    assert sorted(setuptools["packages"]) == sorted(code | templates | scripts | schemas)
    assert setuptools["package-data"].get("gpu_node.shell") == ["*.sh"]
    assert setuptools["package-data"].get("gpu_node.schemas", []) == (["*.schema.json"] if schemas else [])
    assert {package for package, patterns in setuptools["package-data"].items() if "*.j2" in patterns} == templates


def test_every_console_script_names_a_main_of_deploy_callable_with_no_arguments():
    """[project.scripts]: each command runs ``gpu_node.<module>:main`` with no arguments (the console
    script's wrapper; main reads sys.argv itself); a module renamed without its line here installs a
    command that fails on import (tests/e2e/test_package.py runs them installed)."""
    import importlib
    import inspect

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert sorted(scripts) == ["gpu-node-drift", "gpu-node-fleet-report", "gpu-node-pull-install", "gpu-node-rollout"]
    for command, target in scripts.items():
        module, _, function = target.partition(":")
        assert module.startswith("gpu_node.") and function == "main", f"{command} = {target}"
        main = getattr(importlib.import_module("deploy." + module.removeprefix("gpu_node.")), function)
        required = [
            name
            for name, parameter in inspect.signature(main).parameters.items()
            if parameter.default is parameter.empty
            and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        ]
        assert required == [], f"{command}: {target} needs {required}"
