"""Learning from play: played games as training data a trainer can use, checked token for token.

`duck export-sft` (duck.train.export) turns run folders into samples rendered by the one chat
template renderer (duck.llm.render), with the loss on the model's own replies only;
`duck export-check` (duck.train.check) re-renders and re-tokenises them; duck.train.formats
writes ms-swift's and token files; `duck train check-checkpoint` (duck.train.checkpoint)
checks a merged checkpoint before it plays. The format and the commands: docs/training.md.
Nothing here imports torch or transformers; a tokenizer (`--tokenizer`, duck.train.tokens)
needs the `train` extra.
"""


class BadData(ValueError):
    """The input cannot be exported or checked as asked: one line, exit 2, nothing written."""
