"""The NMT family's build job: fine-tuning, training and micro builds, evaluation and pretranslation."""
