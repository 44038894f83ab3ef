import streamlit as st

st.title("dispatch")
st.info("coming")
