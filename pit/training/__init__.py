"""Training: run arguments (`args`), where a run executes (`runtime`, `allocator`), the optimizer and schedule
(`optim`), the objective (`objective`), the run folder (`run_folder`), and the three runs built on them:
`pretrain` (`pit train`), `lora` (`pit lora`) and `bench` (`pit bench`)."""
