# gnuplot script for bench/lease_scale.sh:
#   gnuplot -e "dir='OUT_DIR'; title='T'; waiters='1000'; base='10'" lease_scale.gp
# Reads OUT_DIR/scale_cg.dat, scale_tps.dat, scale_waiters.dat and
# scale_cols.gp (written by lease_scale.sh) and writes OUT_DIR/scale.png: four panels, instructions
# per operation and their ratio to the smallest live-lock count, tps relative
# to it, and tps with 1 waiter relative to none and with many relative to 1.
set terminal pngcairo size 1600,1100 font ",10" noenhanced
set output dir.'/scale.png'
cg = dir.'/scale_cg.dat'
tps = dir.'/scale_tps.dat'
wt = dir.'/scale_waiters.dat'

load dir.'/scale_cols.gp'  # kinds: the kinds in scale_cg.dat; tcols: the columns of scale_tps.dat

set multiplot layout 2,2 title title font ",13"
set grid
set logscale x 10
set format x "%.0f"
set xlabel "live locks (other locks with a live lease)"
set key top left box opaque

set title "instructions per operation (callgrind)"
set ylabel "instructions per operation"
set yrange [0:*]
plot for [c=2:1+kinds] cg using 1:c with linespoints lw 2 pt 7 ps 1.2 lt (c - 1) title columnheader(c)

set title "instructions per operation, ratio to ".base." live locks (goal: within the band)"
set ylabel "ratio to ".base." live locks"
set yrange [0.8:*]
plot 1.1 with lines dt 2 lc rgb "gray40" title "±10 %", \
     0.9 with lines dt 2 lc rgb "gray40" notitle, \
     for [c=2+kinds:1+2*kinds] cg using 1:c with linespoints lw 2 pt 7 ps 1.2 lt (c - 1 - kinds) \
       title columnheader(c)

set title "pgbench tps, ratio to ".base." live locks (median of the rounds; higher is better)"
set ylabel "tps ÷ tps at ".base." live locks"
set yrange [*:*]
plot 0.9 with lines dt 2 lc rgb "gray40" title "-10 %", \
     1.0 with lines lc rgb "gray70" notitle, \
     for [c=2:tcols] tps using 1:c with linespoints lw 2 pt 7 ps 1.2 lt (c / 2) dt 1 + c % 2 \
       title columnheader(c)

unset logscale x
set format x "%g"
set title "waiters on the lock 'hot' (".base." live locks): tps ratios (median of the rounds)"
unset xlabel
set ylabel "tps ratio"
set yrange [0:*]
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set xtics rotate by 30 right
set key below
plot wt using 2:xtic(1) lt 6 title "1 waiter ÷ none (the held xmin horizon)", \
     '' using 3 lt 4 title waiters." waiters ÷ 1 waiter", \
     '' using 4 lt 5 title waiters." waiters ÷ 1 waiter, normalised by the bare UPDATE", \
     0.9 with lines dt 2 lc rgb "gray40" title "-10 %"
unset multiplot
