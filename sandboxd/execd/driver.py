# execd code-context driver: requests on fd 3, events on fd 4, one JSON object a line.
import ast, json, os, sys, traceback
_rq = os.fdopen(3, 'r', encoding='utf-8')
_ev = os.fdopen(4, 'w', encoding='utf-8')
def _emit(**e):
    _ev.write(json.dumps(e) + '\n')
    _ev.flush()
class _Out:
    encoding = 'utf-8'
    def __init__(self, t): self.t = t
    def write(self, x):
        if x: _emit(type=self.t, text=x)
        return len(x)
    def flush(self): pass
    def isatty(self): return False
    def writable(self): return True
sys.stdout, sys.stderr = _Out('stdout'), _Out('stderr')
_ns = {'__name__': '__main__', '__builtins__': __builtins__}
_n = 0
def _run(code):
    tree = ast.parse(code, '<cell>', 'exec')
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, '<cell>', 'exec'), _ns)
    if last is not None:
        v = eval(compile(last, '<cell>', 'eval'), _ns)
        if v is not None:
            _ns['_'] = v
            return repr(v)
    return None
while True:
    try:
        line = _rq.readline()
        if not line:
            break
        _n += 1
        try:
            r = _run(json.loads(line)['code'])
            _emit(type='done', count=_n, result=r)
        except BaseException as e:
            tb = e.__traceback__
            if tb is not None and tb.tb_next is not None:
                tb = tb.tb_next  # the driver's own frame
            _emit(type='done', count=_n, error={'ename': type(e).__name__, 'evalue': str(e),
                  'traceback': traceback.format_exception(type(e), e, tb)})
    except KeyboardInterrupt:
        continue
