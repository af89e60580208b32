"""Packaging for binding_nb; all metadata lives in settings.ini (nbdev 2)."""
from configparser import ConfigParser

import setuptools

cfg = ConfigParser(delimiters=["="])
cfg.read("settings.ini", encoding="utf-8")
meta = cfg["DEFAULT"]

setuptools.setup(
    name=meta["lib_name"],
    version=meta["version"],
    description=meta["description"],
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    author=meta["author"],
    author_email=meta["author_email"],
    license="Apache-2.0",
    keywords=meta["keywords"].split(),
    url=meta["git_url"],
    packages=setuptools.find_packages(include=[meta["lib_name"], meta["lib_name"] + ".*"]),
    include_package_data=True,
    python_requires=">=" + meta["min_python"],
    install_requires=meta["requirements"].split(),
    extras_require={"dev": meta["dev_requirements"].split()},
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "License :: OSI Approved :: Apache Software License",
        "Natural Language :: English",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    project_urls={"Documentation": meta["doc_host"] + meta["doc_baseurl"], "Source": meta["git_url"]},
    scripts=[],
    entry_points={
        "console_scripts": meta.get("console_scripts", "").split(),   # settings.ini: name=module:function, space-separated
        "binding_nb.inputs": meta.get("input_kinds", "").split(),     # settings.ini: the input kinds this package declares, name=module
        "nbdev": [f"{meta['lib_path']}={meta['lib_path']}._modidx:d"],
    },
    zip_safe=False,
)
