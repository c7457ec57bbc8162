"""The workbench beside the product: the stub server, the rehearsal, the benchmarks, the
scheduler's simulator, the doctor and the replay of the Duck's snippets. It imports anything in
`duck/` and `scheduler/`; nothing there imports it (only the command table of duck/cli.py names
its modules), and the Kaggle wheel leaves it out."""
