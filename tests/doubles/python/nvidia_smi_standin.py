"""Stand-in for ``nvidia-smi`` on the test cluster's compute nodes, which have no GPU.

It stands for the NVIDIA driver's ``nvidia-smi`` (driver 580.159.04, CUDA 13.0) on an 8-GPU H200 node, and
prints exactly the formats captured on a real H200 (../../../../shared/reference/captured/h200/, kept
verbatim in ``nvidia_smi_captured/``): the default table, ``-q``, and ``--query-gpu=...`` /
``--query-compute-apps=...`` with ``--format=csv[,noheader][,nounits]``. Only the values that differ between
the GPUs of a node (index, bus id, UUID, minor number, module id) and those the switches change are edited.

Which GPUs: those the job got, from ``CUDA_VISIBLE_DEVICES`` (indices 0-7; all 8 when it is unset), and of
those the ones ``-i`` names. Like the real tool it refuses a field it does not know (``Field "x" is not a
valid field to query.``, exit 2) and an ``-i`` id that is not there (exit 6).

Switches (standin_switch.py: env ``GLM_STANDIN_<NAME>`` first, else the control file NAME), each a list of
``NODE:INDEX`` (or ``INDEX`` for every node), comma or space separated, matched against ``$SLURMD_NODENAME``:

- ``gpu-busy``: that GPU holds 70000 MiB for a compute process (pid 4242, ``python3``), as a GPU that an
  earlier job left behind, or another job's process on a shared node;
- ``gpu-ecc``: that GPU has 2 uncorrectable volatile (DRAM) ECC errors;
- ``gpu-missing``: that GPU is not listed (fallen off the bus);
- ``gpu-prohibited``: that GPU's compute mode is Prohibited;
- ``gpu-driver``: ``NODE:VERSION`` (or ``VERSION`` for every node): the node's NVIDIA driver is that version
  (``driver_version``, the table's and ``-q``'s ``Driver Version``, and their ``CUDA Version``: the newest CUDA that
  driver branch supports, NVIDIA's CUDA Toolkit release notes, table 3), e.g. ``570.172.08`` (CUDA 12.8) for a node
  too old for SGLang 0.5.21's CUDA 13 image.

``driver_version`` is the field and format of ``query-gpu-driver.csv`` (captured on the same H200: the GPU check's
fields plus ``driver_version``) and ``compute_cap`` that of ``driver-version.txt`` (``580.159.04, 9.0``).

Not modelled: MIG, NVLink and ``topo``, ``dmon``/``pmon``, anything that changes the GPUs (``-r``, ``-pm``, ...).
"""
from __future__ import annotations

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_switch import switch  # noqa: E402  (next to this file)

CAPTURED = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'nvidia_smi_captured')
GPUS_PER_NODE = 8
# An HGX H200 board's bus ids; GPU 0 keeps the one captured (a VM's), so one GPU prints exactly the capture.
BUS_IDS = ['00000000:00:06.0', '00000000:2A:00.0', '00000000:3A:00.0', '00000000:5D:00.0',
           '00000000:9A:00.0', '00000000:AB:00.0', '00000000:BA:00.0', '00000000:DB:00.0']
BUSY_PID, BUSY_NAME, BUSY_MIB = 4242, 'python3', 70000
ECC_ERRORS = 2
CAPTURED_DRIVER, CAPTURED_CUDA = '580.159.04', '13.0'
# the newest CUDA each driver branch supports (NVIDIA CUDA Toolkit release notes, minimum driver per toolkit)
CUDA_OF_BRANCH = ((580, '13.0'), (575, '12.9'), (570, '12.8'), (565, '12.7'), (560, '12.6'), (555, '12.5'),
                  (550, '12.4'), (545, '12.3'), (535, '12.2'), (530, '12.1'), (525, '12.0'), (520, '11.8'))


def read(name):
    with open(os.path.join(CAPTURED, name), encoding='utf-8') as handle:
        return handle.read()


def driver():
    """(driver version, CUDA version) of this node: the capture's, or the switch gpu-driver's."""
    node = os.environ.get('SLURMD_NODENAME', '')
    for item in re.split(r'[,\s]+', switch('gpu-driver', '') or ''):
        where, _sep, version = item.rpartition(':')
        if version and (not where or where == node):
            major = int(version.split('.')[0]) if version.split('.')[0].isdigit() else 0
            cuda = next((c for branch, c in CUDA_OF_BRANCH if major >= branch), '11.0')
            return version, (CAPTURED_CUDA if major >= 580 else cuda)
    return CAPTURED_DRIVER, CAPTURED_CUDA


def targets(name):
    """The GPU indices a switch names for this node."""
    node = os.environ.get('SLURMD_NODENAME', '')
    found = set()
    for item in re.split(r'[,\s]+', switch(name, '') or ''):
        if not item:
            continue
        where, index = item.rpartition(':')[::2]
        if (not where or where == node) and index.isdigit():
            found.add(int(index))
    return found


class Gpu:
    def __init__(self, index, base):
        self.index = index
        self.bus_id = BUS_IDS[index]
        self.uuid = 'GPU-%08d-0000-0000-0000-000000000000' % index
        self.total = int(base['memory.total'].split()[0])
        self.reserved = 616
        self.busy = index in targets('gpu-busy')
        self.used = BUSY_MIB if self.busy else int(base['memory.used'].split()[0])
        # free as the driver counts it (the capture: 143156 of 143771 with 616 reserved and 0 used)
        self.free = int(base['memory.free'].split()[0]) - (self.used - int(base['memory.used'].split()[0]))
        self.ecc = ECC_ERRORS if index in targets('gpu-ecc') else 0
        self.mode = 'Prohibited' if index in targets('gpu-prohibited') else base['compute_mode']
        self.base = base

    def values(self):
        """{field: (value with units, value without)} as --query-gpu prints them."""
        b = self.base
        out = {}
        for field, text in b.items():
            out[field] = (text, text.split()[0] if text.endswith((' MiB', ' %', ' W')) else text)

        def mib(n):
            return ('%d MiB' % n, '%d' % n)
        out.update({
            'index': ('%d' % self.index,) * 2, 'uuid': (self.uuid,) * 2, 'gpu_uuid': (self.uuid,) * 2,
            'pci.bus_id': (self.bus_id,) * 2, 'gpu_bus_id': (self.bus_id,) * 2,
            'memory.total': mib(self.total), 'memory.used': mib(self.used), 'memory.free': mib(self.free),
            'memory.reserved': mib(self.reserved),
            'ecc.errors.uncorrected.volatile.total': ('%d' % self.ecc,) * 2,
            'compute_mode': (self.mode,) * 2,
            'utilization.gpu': ('%d %%' % (35 if self.busy else 0), '%d' % (35 if self.busy else 0)),
            'driver_version': (driver()[0],) * 2, 'compute_cap': ('9.0',) * 2,
        })
        return out


def captured_gpu():
    """The captured --query-gpu row as {field: value}."""
    lines = read('query-gpu.csv').strip().splitlines()
    heads = [h.strip() for h in lines[0].split(',')]
    values = [v.strip() for v in lines[1].split(',')]
    fields = [re.sub(r' \[.*\]$', '', h) for h in heads]
    return dict(zip(fields, values)), dict(zip(fields, heads))


def visible(base):
    cvd = os.environ.get('CUDA_VISIBLE_DEVICES')
    indices = list(range(GPUS_PER_NODE))
    if cvd is not None:
        indices = [int(i) for i in cvd.split(',') if i.strip().isdigit() and int(i) < GPUS_PER_NODE]
    missing = targets('gpu-missing')
    return [Gpu(i, base) for i in indices if i not in missing]


# -- formats ----------------------------------------------------------------------------------------------


def csv_format(spec):
    parts = set((spec or 'csv').split(','))
    if 'csv' not in parts:
        fail('"%s" is not a valid format.' % spec, 2)
    return 'noheader' in parts, 'nounits' in parts


HEADERS_APPS = {'pid': 'pid', 'process_name': 'process_name', 'used_memory': 'used_gpu_memory [MiB]',
                'gpu_uuid': 'gpu_uuid', 'gpu_bus_id': 'gpu_bus_id', 'gpu_name': 'gpu_name'}


def query_gpu(gpus, fields, fmt, headers):
    noheader, nounits = csv_format(fmt)
    names = [f.strip() for f in fields.split(',') if f.strip()]
    known = gpus[0].values() if gpus else Gpu(0, captured_gpu()[0]).values()
    for name in names:
        if name not in known:
            fail('Field "%s" is not a valid field to query.' % name, 2)
    lines = []
    if not noheader:
        lines.append(', '.join(headers.get(n, n) for n in names))
    for gpu in gpus:
        values = gpu.values()
        lines.append(', '.join(values[n][1 if nounits else 0] for n in names))
    return lines


def query_apps(gpus, fields, fmt):
    noheader, nounits = csv_format(fmt)
    names = [f.strip() for f in fields.split(',') if f.strip()]
    for name in names:
        if name not in HEADERS_APPS:
            fail('Field "%s" is not a valid field to query.' % name, 2)
    lines = [] if noheader else [', '.join(HEADERS_APPS[n] for n in names)]
    for gpu in gpus:
        if gpu.busy:
            row = {'pid': str(BUSY_PID), 'process_name': BUSY_NAME, 'gpu_uuid': gpu.uuid, 'gpu_bus_id': gpu.bus_id,
                   'gpu_name': gpu.base['name'], 'used_memory': str(BUSY_MIB) if nounits else '%d MiB' % BUSY_MIB}
            lines.append(', '.join(row[n] for n in names))
    return lines


def table(gpus):
    text = [swap_driver(line) for line in read('nvidia-smi.txt').splitlines()]
    head = [time.strftime('%a %b %e %H:%M:%S %Y') + '       '] + text[1:8]
    row = text[8:11]
    rule = text[11]
    procs_head = text[12:18]
    none = text[18]
    end = text[19]
    out = list(head)
    for gpu in gpus:
        lines = [line.replace('00000000:00:06.0', gpu.bus_id) for line in row]
        lines[0] = re.sub(r'^\|\s+0 ', '|   %d ' % gpu.index, lines[0])
        lines[1] = re.sub(r'\s+0MiB / 143771MiB', lambda m: ('%dMiB / %dMiB' % (gpu.used, gpu.total)).rjust(len(m.group(0))), lines[1])
        if gpu.ecc:
            lines[0] = re.sub(r'Off \|(\s+)0 \|$', lambda m: 'Off |%s%d |' % (m.group(1), gpu.ecc), lines[0])
        if gpu.mode != 'Default':
            lines[1] = lines[1].replace('     Default |', gpu.mode.rjust(12) + ' |')
        out += lines + [rule]
    out += procs_head
    busy = [g for g in gpus if g.busy]
    if not busy:
        out.append(none)
    for gpu in busy:
        line = '|  %3d   N/A  N/A  %14d      C   %-36s %8dMiB |' % (gpu.index, BUSY_PID, BUSY_NAME, BUSY_MIB)
        out.append(line)
    out.append(end)
    return out


def swap_driver(line):
    """A captured line with this node's driver and CUDA versions (the same width in the table)."""
    version, cuda = driver()
    if (version, cuda) == (CAPTURED_DRIVER, CAPTURED_CUDA):
        return line
    if line.startswith('| NVIDIA-SMI'):
        return '| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|' % (version, version, cuda)
    if line.startswith('Driver Version'):
        return line.replace(CAPTURED_DRIVER, version)
    if line.startswith('CUDA Version'):
        return line.replace(CAPTURED_CUDA, cuda)
    return line


def query_q(gpus):
    text = [swap_driver(line) for line in read('nvidia-smi-q.txt').splitlines()]
    start = next(i for i, line in enumerate(text) if line.startswith('GPU 0000'))
    head = text[:start]
    block = text[start:]
    out = []
    for line in head:
        if line.startswith('Timestamp'):
            line = line.split(':', 1)[0] + ': ' + time.strftime('%a %b %e %H:%M:%S %Y')
        if line.startswith('Attached GPUs'):
            line = line.split(':', 1)[0] + ': %d' % len(gpus)
        out.append(line)
    for number, gpu in enumerate(gpus):
        section = None
        for line in block:
            key = line.split(':', 1)[0].strip()
            if line.startswith('GPU 0000'):
                line = 'GPU ' + gpu.bus_id
            elif key in ('FB Memory Usage', 'BAR1 Memory Usage', 'Conf Compute Protected Memory Usage', 'Volatile',
                         'Aggregate', 'ECC Errors'):
                section = key
            if ':' in line:
                name, value = line.split(':', 1)
                stripped = name.strip()
                if stripped == 'GPU UUID':
                    value = ' ' + gpu.uuid
                elif stripped == 'Minor Number':
                    value = ' %d' % gpu.index
                elif stripped == 'Module Id':
                    value = ' %d' % (gpu.index + 1)
                elif stripped == 'Bus Id':
                    value = ' ' + gpu.bus_id
                elif stripped in ('Bus', 'Device') and name.startswith('        ') and not name.startswith('            '):
                    part = gpu.bus_id.split(':')[1] if stripped == 'Bus' else gpu.bus_id.split(':')[2].split('.')[0]
                    value = ' 0x' + part
                elif section == 'FB Memory Usage' and stripped in ('Used', 'Free'):
                    value = ' %d MiB' % (gpu.used if stripped == 'Used' else gpu.free)
                elif section in ('Volatile', 'Aggregate') and stripped == 'DRAM Uncorrectable':
                    value = ' %d' % gpu.ecc
                elif stripped == 'Compute Mode':
                    value = ' ' + gpu.mode
                elif stripped == 'Processes' and gpu.busy:
                    out.append(name.rstrip())
                    pad = len(name) - 4
                    for label, val, depth in (('GPU instance ID', 'N/A', 8), ('Compute instance ID', 'N/A', 8),
                                              ('Process ID', str(BUSY_PID), 8), ('Type', 'C', 12),
                                              ('Name', BUSY_NAME, 12), ('Used GPU Memory', '%d MiB' % BUSY_MIB, 12)):
                        out.append((' ' * depth + label).ljust(pad + 4) + ': ' + val)
                    continue
                line = name + ':' + value
            out.append(line)
        if number < len(gpus) - 1:
            out.append('')
    return out


def fail(message, code):
    sys.stdout.write(message + '\n')
    sys.exit(code)


def main(argv):
    base, headers = captured_gpu()
    gpus = visible(base)
    args = list(argv)
    opts = {}
    positional = []
    while args:
        arg = args.pop(0)
        if arg.startswith('--') and '=' in arg:
            key, value = arg.split('=', 1)
            opts[key] = value
        elif arg in ('-i', '--id', '-f', '--format'):
            opts[{'-i': '--id', '-f': '--format'}.get(arg, arg)] = args.pop(0) if args else ''
        elif arg in ('-q', '--query'):
            opts['-q'] = True
        else:
            positional.append(arg)
    if positional:
        fail('Invalid combination of input arguments. Please run \'nvidia-smi -h\' for help.', 2)
    if '--id' in opts:
        wanted = [w.strip() for w in opts['--id'].split(',') if w.strip()]
        chosen = []
        for w in wanted:
            match = [g for g in gpus if str(g.index) == w or g.uuid == w or g.bus_id == w]
            if not match:
                fail('No devices were found' if not gpus else 'Invalid device id: %s' % w, 6)
            chosen += match
        gpus = chosen
    if not gpus:
        fail('No devices were found', 6)
    if '--query-gpu' in opts:
        lines = query_gpu(gpus, opts['--query-gpu'], opts.get('--format'), headers)
    elif '--query-compute-apps' in opts:
        lines = query_apps(gpus, opts['--query-compute-apps'], opts.get('--format'))
    elif opts.get('-q'):
        lines = query_q(gpus)
    else:
        lines = table(gpus)
    sys.stdout.write('\n'.join(lines) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
