# Medians of bench/pg/flows_sql/run.sh's lines (ms): enqueue, heads, steps per side; the other
# sides against cur per round; the claim's index walk (EXPLAIN ANALYZE, LIMIT 200 unfilled).
import re,sys,statistics as st
rows={}
for line in open(sys.argv[1]):
    m=re.search(r'(R\d+)-(\w+) enqueue ([\d.]+) .*Execution ([\d.]+) .* heads ([\d.]+) .* steps ([\d.]+)',line)
    if not m: continue
    r,v,e,c,h,s=m.groups(); rows.setdefault(v,[]).append((r,float(e),float(h),float(s),float(c)))
for v,l in rows.items():
    print(v, 'enqueue', [x[1] for x in l], 'heads', [x[2] for x in l], 'steps', [x[3] for x in l])
    print('   claim walk ms', [x[4] for x in l])
    print('   medians enqueue %.1f heads %.1f steps %.1f heads+steps %.1f' % (st.median(x[1] for x in l), st.median(x[2] for x in l), st.median(x[3] for x in l), st.median(x[2]+x[3] for x in l)))
vs=list(rows)
if 'cur' in rows:
    for v in vs:
        if v in('cur','plain'): continue
        rat=[ (a[2]+a[3])/(b[2]+b[3]) for a,b in zip(rows[v],rows['cur'])]
        print(v,'/cur heads+steps per round', ['%.2f'%x for x in rat], 'median %.2f'%st.median(rat))
        rat=[ a[2]/b[2] for a,b in zip(rows[v],rows['cur'])]
        print(v,'/cur heads per round', ['%.2f'%x for x in rat], 'median %.2f'%st.median(rat))
if 'plain' in rows:
    for v in vs:
        if v == 'plain': continue
        rat=[ (a[1]+a[2]+a[3])/(b[1]+b[2]+b[3]) for a,b in zip(rows[v],rows['plain'])]
        print(v,'/plain all three per round', ['%.2f'%x for x in rat], 'median %.2f'%st.median(rat))
