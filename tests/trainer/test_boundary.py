import subprocess
import sys


def test_trainer_never_imports_django_celery_or_redis():
    code = ("import sys, trainer, trainer.cli; trainer.algorithm_names(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'redis', 'rlweb')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
