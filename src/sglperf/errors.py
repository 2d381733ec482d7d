"""The root of every error sglperf explains.

An exception derived from :class:`SglperfError` carries a message that says what went wrong, where (file,
field, server, store) and what to do; the CLI and the pytest plugin show it as one line. Any other
exception that reaches them is a bug in sglperf, reported with its traceback.

Each class lives in the module whose work it describes (named here from ``sglperf.``) and keeps the builtin
base it had before the root existed, so ``except ValueError:`` and ``except OSError:`` still catch it::

    SglperfError                                                when raised
    ├── cli.UsageError (ValueError)                             an option or argument the command cannot use
    ├── model.deployment_file.DeploymentError (ValueError)      a deployment file unreadable or invalid
    ├── model.files.InputFileError (OSError)                    an input that is a device, a FIFO or too large
    ├── model.files.OutsideFolderError (ValueError)             a name that would put a file outside its folder
    ├── model.files.NotAFolderError (NotADirectoryError)        a file where sglperf keeps a folder of its own
    ├── sglang.flags.FlagError (ValueError)                     a flag or intent the release cannot take
    ├── sglang.intents.IntentNotExpressible                     no flag for an intent (restated as FlagError)
    ├── sglang.envs.EnvBuildError (RuntimeError)                a managed SGLang environment not built
    ├── sglang.envs.BadVersionError (ValueError)                a release that is not a version
    ├── sglang.metrics_catalogue.ExpositionError (ValueError)   /metrics that is not Prometheus text
    ├── sglang.deprecations.DeprecationsError (ValueError)      sglperf's shipped deprecation ledger unreadable
    ├── preflight.resolver.PreflightError (RuntimeError)        SGLang could not be asked at all
    ├── runtime.server.ServerStartError (RuntimeError)          a server died or was late starting
    ├── runtime.server_info.LiveError (RuntimeError)            a server's introspection endpoints failed
    ├── runtime.attach.AttachError (RuntimeError)               --sglang-url is no usable SGLang server
    ├── runtime.router.RouterError (RuntimeError)               a router whose workers cannot be read
    ├── runtime.slurm.SlurmError (RuntimeError)                 Slurm refused, timed out or could not be reached
    ├── runtime.server_ledger.LedgerError (ValueError)          an unreadable shared-memory ledger entry
    ├── runtime.gpus.NvmlUnavailable (RuntimeError)             NVML cannot say what memory processes hold
    ├── runtime.gpu_telemetry.NvmlUnusable                      NVML cannot watch the GPUs during rounds
    ├── measure.transport.TransportError                        a request not sent, or an answer not HTTP/1.1
    ├── model.prompts.PromptError (ValueError)                  a prompt file unreadable or malformed
    ├── measure.synthetic.SyntheticPromptsError (RuntimeError)  synthetic prompts not made, or their cache unreadable
    ├── measure.samples.MeterError (RuntimeError)               a request or workload not measured
    │   ├── HostBusyError                                       the machine stayed busy for too many rounds
    │   └── GpuDisturbedError                                   a GPU kept throttling or serving another process
    ├── baselines.store.BaselineError (ValueError)              a baseline file that cannot be used
    │   └── BaselineMissing                                     no baseline file at all
    ├── baselines.sequential.SequentialPlanError (ValueError)   no sequential plan for these settings
    ├── baselines.roofline.RooflineError (ValueError)           no roofline: the weights read cannot be counted
    ├── history.sql_store.HistoryError (RuntimeError)           the run-history store cannot be used
    ├── results.folder.ResultsError (ValueError)                a results folder or export file unreadable
    │   └── NoResults                                           a results folder no run wrote anything in
    ├── scaffold.InitError (ValueError)                         `sglperf init` lacks a fact or would overwrite
    ├── upgrade.bisect.BisectStateError (ValueError)            a bisect state file that cannot be resumed
    ├── upgrade.bisect.ReleaseUnusable                          a release cannot run a bisect's item (a verdict)
    ├── plugin.items.ItemFailure                                a failed verdict or measurement, explained
    └── testing.emulator.config.ConfigError (ValueError)        the emulator's configuration is unusable

Outside the root on purpose (tests/unit/test_errors.py lists them, each with its reason)::

    session.LiveSkip                                            control flow: becomes a pytest skip
    testing.emulator.protocol.HttpError                         control flow: becomes the emulator's HTTP error
    testing.emulator.faults.Stalled                             control flow: a stall fault holding a connection
    testing.emulator.server._Shutdown (BaseException)           control flow: SIGTERM leaving serve_forever
    preflight.probe._Refused                                    control flow, inside SGLang's interpreter
    history.postgres_backend._MissingDriver                     private: restated as HistoryError
    runtime.http_deadline.DeadlineError, TooLargeError          httpx errors, caught as httpx.HTTPError
    sglang.cpu_kernel_standin.StandInKernelError                runs as sgl_kernel, where sglperf is absent
    plugin.items.SGLangCaveat (UserWarning)                     a warning category, never raised

This module imports nothing from sglperf: every layer may import it.
"""

from __future__ import annotations


class SglperfError(Exception):
    """An error whose message says what went wrong and what to do: shown as one line, not a traceback."""
